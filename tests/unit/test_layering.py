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


# module -> attributes it must not read: the learner and the experience pipeline are handed
# to each other's code explicitly by train(), never fetched through the Trainer.
NOT_READ = {
    "experience.py": ("lightning_module",),
    "algos/base.py": ("datamodule",),
}


def attributes_read(path: Path) -> set[str]:
    return {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}


@pytest.mark.parametrize("module", sorted(NOT_READ))
def test_the_learner_and_the_experience_do_not_reach_each_other_through_the_trainer(module):
    reached = attributes_read(PACKAGE / module) & set(NOT_READ[module])
    assert not reached, f"{module} reads {sorted(reached)}"
