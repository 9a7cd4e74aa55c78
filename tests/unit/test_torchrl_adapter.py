"""The TorchRL boundary stays true and thin: every private member :mod:`actorq.util.torchrl_adapter`
lists exists, as the kind of member it says, on the installed TorchRL (an upgrade that renames
or reshapes one fails here, by name), and no module outside the adapter reaches a private
member of TorchRL, tensordict or multiprocessing."""

from __future__ import annotations

import ast
import importlib
import inspect
import multiprocessing
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector, MultiAsyncCollector
from torchrl.collectors import _runner as torchrl_runner
from torchrl.envs import EnvBase, SerialEnv
from torchrl.weight_update import SharedMemWeightSyncScheme

from actorq.util import torchrl_adapter as adapter
from actorq.envs import make_batched_env

SRC = Path(adapter.__file__).parent
VERSIONS = f"torchrl {version('torchrl')}, tensordict {version('tensordict')}"

# EnvBase's methods for a subclass to implement: TorchRL's documented way to write an env.
ENV_HOOKS = {"_step", "_reset", "_set_seed"}


@pytest.fixture(scope="module")
def collector():
    """A single-process collector over a lean env, as built in a worker (no process started)."""
    env = make_batched_env("CartPole-v1", None, seed=0, library="gymnasium")
    policy = TensorDictModule(lambda observation: torch.zeros((), dtype=torch.int64), in_keys=["observation"],
                              out_keys=["action"])
    collector = Collector(env, policy, frames_per_batch=10, total_frames=-1, auto_register_policy_transforms=False)
    yield collector
    collector.shutdown()


def _owner(member: adapter.PrivateMember):
    module_name, _, class_name = member.owner.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name) if class_name else module


def _instance(owner: type, collector: Collector):
    if owner is Collector:
        return collector
    if owner is SharedMemWeightSyncScheme:
        return SharedMemWeightSyncScheme(sync=False)
    raise AssertionError(f"no instance of {owner.__name__} to check: add one to _instance")


def _check(member: adapter.PrivateMember, collector: Collector) -> None:
    owner = _owner(member)
    static = inspect.getattr_static(owner, member.name, None) if member.kind != "instance attribute" else None
    if member.kind == "module attribute":
        assert isinstance(getattr(owner, member.name, None), member.expected_type)
    elif member.kind == "class attribute":
        assert static is not None and not callable(static)
    elif member.kind == "property":
        assert isinstance(static, property)
    elif member.kind == "method":
        method = getattr(owner, member.name)
        parameters = tuple(inspect.signature(method).parameters)
        assert parameters[:len(member.parameters)] == member.parameters, parameters
    elif member.kind == "instance attribute":
        instance = _instance(owner, collector)
        assert member.name in vars(instance)
        if member.expected_type is not None:
            assert isinstance(vars(instance)[member.name], member.expected_type)
    else:
        raise AssertionError(f"unknown kind {member.kind!r}")


@pytest.mark.parametrize("member", adapter.PRIVATE_MEMBERS, ids=lambda member: f"{member.owner}.{member.name}")
def test_every_listed_private_member_exists_as_listed(member, collector):
    try:
        _check(member, collector)
    except (AssertionError, AttributeError, TypeError, ValueError) as error:
        pytest.fail(f"{member.owner}.{member.name} is not the {member.kind} actorq expects on {VERSIONS} ({error}); "
                    f"actorq uses it because {member.why}; replace it with {member.replacement}")


def test_the_worker_loop_still_reads_what_the_adapter_sets():
    """Setting ``_runner._MIN_TIMEOUT`` or a collector class's ``_ignore_rb`` does something
    only while TorchRL's worker loop reads them from there."""
    loop = torchrl_runner._main_async_collector_impl.__code__
    assert "_MIN_TIMEOUT" in loop.co_names, f"TorchRL's worker loop no longer polls with _MIN_TIMEOUT ({VERSIONS})"
    assert "_ignore_rb" in loop.co_names, f"TorchRL's worker loop no longer sets _ignore_rb ({VERSIONS})"


class _ProcessStandIn:
    """What ``_check_for_faulty_process`` reads of a ``multiprocessing.Process``."""

    def __init__(self, closed: bool, exitcode: int | None):
        self._closed, self.exitcode = closed, exitcode

    def is_alive(self) -> bool:
        return False


def test_torchrl_report_of_a_dead_worker_names_it():
    from torchrl._utils import _check_for_faulty_process

    with pytest.raises(RuntimeError) as raised:
        _check_for_faulty_process([_ProcessStandIn(closed=True, exitcode=0), _ProcessStandIn(closed=False, exitcode=-9)])
    assert adapter.failed_worker(raised.value) == (1, -9), str(raised.value)
    assert adapter.failed_worker(ValueError("worker 1 (exit code -9)")) is None


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names(collector: Collector) -> set[str]:
    """The private members TorchRL's, tensordict's and multiprocessing's classes that actorq
    builds on define on the class or set on an instance."""
    names = {member.name for member in adapter.PRIVATE_MEMBERS}
    classes = (Collector, MultiAsyncCollector, SharedMemWeightSyncScheme, EnvBase, SerialEnv, TensorDict,
               TensorDictBase, multiprocessing.Process)
    for cls in classes:
        for base in cls.__mro__:
            if base.__module__.split(".")[0] in ("torchrl", "tensordict", "multiprocessing"):
                names |= {name for name in vars(base) if _private(name)}
    instances = (collector, SharedMemWeightSyncScheme(sync=False),
                 multiprocessing.get_context("spawn").Process(target=print))
    for instance in instances:
        names |= {name for name in vars(instance) if _private(name)}
    return names - ENV_HOOKS


def _private_uses(tree: ast.AST, private_names: set[str]) -> list[str]:
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in private_names:
            uses.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in private_names:  # getattr(x, "_name")
            uses.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.ClassDef):  # a method overriding a private one
            uses += [f"line {item.lineno}: def {node.name}.{item.name}" for item in node.body
                     if isinstance(item, ast.FunctionDef) and item.name in private_names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torchrl":
            imported = [alias.name for alias in node.names]
            if any(_private(name) for name in [*node.module.split("."), *imported]):
                uses.append(f"line {node.lineno}: from {node.module} import {', '.join(imported)}")
        elif isinstance(node, ast.Import):
            uses += [f"line {node.lineno}: import {alias.name}" for alias in node.names
                     if alias.name.startswith("torchrl.") and any(_private(part) for part in alias.name.split("."))]
    return uses


def test_no_module_but_the_adapter_reaches_private_torchrl_members(collector):
    private_names = _private_names(collector)
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "torchrl_adapter.py":
            continue
        uses = _private_uses(ast.parse(path.read_text()), private_names)
        if uses:
            found[str(path.relative_to(SRC))] = uses
    assert not found, f"private TorchRL members used outside actorq.util.torchrl_adapter (move them there): {found}"


def test_the_boundary_check_sees_a_private_use():
    """The scan above finds the kinds of use it guards against."""
    source = ("from torchrl.collectors import _runner\nfrom torchrl._utils import seed_generator\n"
              "process._closed\ncollector._carrier.get('x')\ngetattr(collector, '_weight_sync_schemes')\n"
              "class C:\n    def _queue_len(self): ...\n")
    uses = _private_uses(ast.parse(source), {"_closed", "_carrier", "_weight_sync_schemes", "_queue_len"})
    assert len(uses) == 6, uses
