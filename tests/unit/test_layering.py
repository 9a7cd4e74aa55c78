"""Which package may import which: the learning math does not depend on how experience is
collected, so an algorithm can be read, tested and reused without actor processes."""

import ast
from pathlib import Path

import pytest

import actorq

PACKAGE = Path(actorq.__file__).parent

# package -> modules of actorq it must not import (directly or as ``from actorq.x import y``)
FORBIDDEN = {
    "algos": ("actorq.actors", "actorq.callbacks", "actorq.data.experience", "actorq.train"),
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


# module -> attributes it must not read: the learner and the experience pipeline are handed
# to each other's code explicitly by train(), never fetched through the Trainer.
NOT_READ = {
    "data/experience.py": ("lightning_module",),
    "algos/base.py": ("datamodule",),
    "algos/off_policy.py": ("datamodule",),
    "algos/on_policy.py": ("datamodule",),
}


def attributes_read(path: Path) -> set[str]:
    return {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}


@pytest.mark.parametrize("module", sorted(NOT_READ))
def test_the_learner_and_the_experience_do_not_reach_each_other_through_the_trainer(module):
    reached = attributes_read(PACKAGE / module) & set(NOT_READ[module])
    assert not reached, f"{module} reads {sorted(reached)}"


ENTRY_MODULES = {"__init__.py", "__main__.py", "train.py", "evaluate.py", "export.py", "report.py"}
"""The package root: the commands a user runs and the recipe; everything else is in a package
named for its role."""


def test_the_package_root_holds_only_the_entry_points():
    assert {path.name for path in PACKAGE.glob("*.py")} == ENTRY_MODULES


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The actorq modules ``path`` imports anywhere (inside functions too: a lazy import is
    still a dependency), except under ``if TYPE_CHECKING:``; ``from package import module``
    counts as importing the module."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(branch.test) for node in ast.walk(branch)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules
            found.update(submodules if len(submodules) == len(node.names) else {node.module, *submodules})
    return found & modules


def test_no_module_imports_itself_back_through_others():
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py") if "conf" not in path.parts}
    graph = {name: runtime_imports(path, set(paths)) - {name} for name, path in paths.items()}
    circles = []
    for start in graph:  # a depth-first walk from each module back to itself
        stack = [(start, (start,))]
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join((*trail, start)))
                elif nxt not in trail and len(trail) < 8:
                    stack.append((nxt, (*trail, nxt)))
    assert not circles, sorted(circles)[:5]
