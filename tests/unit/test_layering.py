"""Which package may import which: the packages form layers, no module or package imports
itself back through others, and the learner and the experience pipeline meet only where
``train()`` connects them."""

import ast
from pathlib import Path

import pytest

import actorq

PACKAGE = Path(actorq.__file__).parent

LAYERS = ("util", "envs", "quant", "algos", "data", "actors", "experience", "callbacks", "run", "train",
          "tools", "evaluate", "export", "report", "bench", "__main__")
"""The packages (and root modules) of actorq from the bottom up: each imports only those below
it. The learning math (``algos``) sits below how experience is collected (``actors``,
``experience``), so an algorithm can be read, tested and reused without actor processes; the
package root's ``__init__`` sits above all of them."""


def layer_of(module: str) -> str | None:
    """``actorq.data.replay.base`` -> ``data``; ``actorq`` itself -> ``None``."""
    parts = module.split(".")
    return parts[1] if parts[0] == "actorq" and len(parts) > 1 else None


def every_import(path: Path) -> set[str]:
    """The actorq modules ``path`` imports anywhere: at the top, inside functions and under
    ``if TYPE_CHECKING:`` alike (each is a dependency a reader has to follow)."""
    name = module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                package = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join([*package, *([node.module] if node.module else [])])
            found.update(f"{base}.{alias.name}" for alias in node.names) if base == "actorq" else found.add(base)
    return {module for module in found if module.split(".")[0] == "actorq"}


def test_every_package_is_listed_in_the_layers():
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()} - {"conf"}
    roots = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert packages | roots == set(LAYERS)


def test_each_package_imports_only_the_layers_below_it():
    upward = set()
    for path in PACKAGE.rglob("*.py"):
        layer = layer_of(module_name(path))
        if layer is None or "conf" in path.parts:
            continue
        for module in every_import(path):
            target = layer_of(module)
            if target is not None and target != layer and LAYERS.index(target) > LAYERS.index(layer):
                upward.add(f"{path.relative_to(PACKAGE)} ({layer}) imports {module} ({target})")
    assert not upward, sorted(upward)


# module -> attributes it must not read: the learner and the experience pipeline are handed
# to each other's code explicitly by train(), never fetched through the Trainer.
NOT_READ = {
    "experience/pipeline.py": ("lightning_module",),
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
