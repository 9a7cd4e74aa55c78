"""The unit tier stays fast and in-process: no test module in it starts a subprocess (those
live in ``tests/component`` and ``tests/integration``)."""

import ast
from pathlib import Path

UNIT = Path(__file__).parent


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_unit_test_module_imports_subprocess():
    starting = sorted(path.name for path in UNIT.rglob("*.py") if "subprocess" in imported_modules(path))
    assert starting == []
