"""Which package may import which: the learning math does not depend on how experience is
collected, so an algorithm can be read, tested and reused without actor processes."""

import ast
from pathlib import Path

import pytest

import actorq

PACKAGE = Path(actorq.__file__).parent

# package -> modules of actorq it must not import (directly or as ``from actorq.x import y``)
FORBIDDEN = {
    "algos": ("actorq.actors", "actorq.callbacks", "actorq.experience", "actorq.train"),
}


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_nothing_it_must_not(package):
    files = sorted((PACKAGE / package).rglob("*.py"))
    assert files
    offending = {f"{path.relative_to(PACKAGE)} imports {module}"
                 for path in files for module in imported_modules(path)
                 for forbidden in FORBIDDEN[package] if module == forbidden or module.startswith(forbidden + ".")}
    assert not offending, sorted(offending)
