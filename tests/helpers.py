"""Test helpers: learners attached to a real Lightning Trainer without fitting, the random
transitions their updates are tested on, a run's TensorBoard scalars, the processes a test
left running, the worked examples of the docs and a made-up precision format."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import psutil
import torch
from lightning.pytorch.core.optimizer import _init_optimizers_and_lr_schedulers
from tensordict import TensorDict
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from actorq.envs import EnvSpec
from actorq.quant.codecs import Codec, float_payload, float_payload_spec, plain_trunk
from actorq.algos.batches import Sample

CONTINUOUS = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
DISCRETE = EnvSpec(obs_dim=4, discrete=True, num_actions=2)
CARTPOLE_SOLVED = 475.0
DOCS = Path(__file__).parents[1] / "docs"


def example(name: str, page: str = "architecture.md", language: str = "python") -> str:
    """The ``language`` block that follows ``<!-- example: NAME -->`` on a docs page."""
    found = re.search(rf"<!-- example: {name} -->\s*```{language}\n(.*?)```", (DOCS / page).read_text(), re.S)
    assert found, f"no example {name!r} on {page}"
    return found.group(1)


def load_module(name: str, source: str, **names) -> types.ModuleType:
    """Executes ``source`` as module ``name`` (so Hydra's ``_target_`` finds it), with
    ``names`` defined first (what the page says the reader already has)."""
    module = types.ModuleType(name)
    module.__dict__.update(names)
    sys.modules[name] = module
    exec(compile(source, f"docs:{name}", "exec"), module.__dict__)
    return module


def attach_trainer(learner: L.LightningModule, total_frames: int = 10_000, **experience) -> L.Trainer:
    """Gives ``learner`` a real Trainer, optimizers and LR schedulers, so ``update`` can run
    outside ``fit``. The learner learns from a stand-in experience pipeline holding a
    :class:`RecordingReplay` (as its ``replay`` and its ``sampling``) and the run's
    ``total_frames`` (what the learner reads from its experience pipeline), and ``experience``'s
    fields (e.g. an on-policy learner's ``frames_per_batch`` and ``policy_version``)."""
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    learner.trainer = trainer
    replay = RecordingReplay()
    learner.learn_from(SimpleNamespace(replay=replay, sampling=replay, total_frames=total_frames, **experience))
    trainer.strategy.connect(learner)
    trainer.strategy._lightning_optimizers = []
    optimizers, schedulers = _init_optimizers_and_lr_schedulers(learner)
    trainer.strategy.optimizers = optimizers
    trainer.strategy.lr_scheduler_configs = schedulers
    return trainer


def random_sample(spec: EnvSpec, size: int = 32) -> Sample:
    """A replay sample of random transitions, all weights 1."""
    action = (torch.randint(spec.num_actions, (size,)) if spec.discrete
              else torch.rand(size, spec.action_dim) * 4 - 2)
    batch = TensorDict(
        {"observation": torch.randn(size, spec.obs_dim), "action": action,
         "reward": torch.randn(size), "next_observation": torch.randn(size, spec.obs_dim),
         "discount": torch.full((size,), 0.99)},
        batch_size=[size],
    )
    return Sample(batch, torch.arange(size), torch.ones(size))


class RecordingReplay:
    """Stands in for a replay buffer; keeps the last priorities a learner fed back."""

    def __init__(self):
        self.priorities = None

    def update_priorities(self, indices, priorities):
        self.priorities = priorities


def fit_fixed_batch(learner: L.LightningModule, spec: EnvSpec, updates: int = 60) -> tuple[list[float], dict]:
    """Runs ``updates`` updates on one random batch (with a recording replay and a real
    Trainer); returns the TD losses along the way and the metrics of one more update."""
    attach_trainer(learner)
    sample = random_sample(spec)
    losses = [float(learner.update(sample)["loss_value"]) for _ in range(updates)]
    return losses, learner.update(sample)


def solved_evaluations(summary: dict, history: str = "eval_history") -> list[int]:
    """Frames at which an evaluation of a CartPole run scored at least the solved bar."""
    return [frames for frames, mean in summary[history] if mean >= CARTPOLE_SOLVED]


def scalars(tb_dir: Path, keep: Callable[[str], bool] = lambda name: True) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` over the event files whose names ``keep`` accepts."""
    out: dict[str, list] = {}
    for path in sorted(tb_dir.iterdir()):
        if not keep(path.name):
            continue
        events = EventAccumulator(str(path))
        events.Reload()
        for tag in events.Tags()["scalars"]:
            out.setdefault(tag, []).extend((event.step, event.value) for event in events.Scalars(tag))
    return out


def is_service(process: psutil.Process) -> bool:
    """multiprocessing's resource tracker or fork server: each lives as long as the process that
    started it (the test session, a run's main process), not as long as one pool of workers. The
    workers the fork server forks share its command line; their parent is the server. A child of
    the server with a command line of its own is the server's while it imports the modules it
    preloads (glfw, imported with dm_control, asks a subprocess for its library's version)."""
    try:
        command = " ".join(process.cmdline())
        if "multiprocessing.resource_tracker" in command:
            return True
        parent = " ".join(process.parent().cmdline())
        if "multiprocessing.forkserver" in command:
            return "multiprocessing.forkserver" not in parent
        return "multiprocessing.forkserver" in parent and is_service(process.parent())
    except (psutil.Error, AttributeError):  # ended, or no parent left
        return False


class Twelve(Codec):
    """A made-up implicit precision format for a bits value nobody serves (fp32 under the hood);
    the codec tests register it, or variants of it, and remove it again."""

    name = "twelve"
    bits = (12,)
    bits_help = "12 (twelve)"

    def payload_spec(self, layout, spec):
        return float_payload_spec(layout, torch.float32)

    def encode(self, trunk, layout, spec, calibration):
        return float_payload(trunk, layout, torch.float32)

    def decode(self, layout, spec, payload):
        return plain_trunk(layout, payload)


def still_running(processes: Iterable[psutil.Process], grace_s: float = 10.0) -> list[int]:
    """The pids of ``processes`` still running ``grace_s`` seconds after the call at the latest
    (a zombie has ended). The grace: multiprocessing's resource tracker exits only after the
    run's main process, once it has read the end of its pipe and cleaned up (a CI run found it
    alive the moment the run ended)."""
    processes = list(processes)
    psutil.wait_procs(processes, timeout=grace_s)
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process.pid)
        except psutil.NoSuchProcess:
            pass
    return left


def assert_computes_the_reference(actual: torch.Tensor, reference: torch.Tensor, tie_fraction: float = 0.02) -> None:
    """``actual`` is what ``reference`` computes from the same int8 codes: equal (to 1e-6) but
    for at most ``tie_fraction`` of its elements, which differ by no more than a few rounding
    steps (another kernel rounds an intermediate code the other way at a tie), never the most
    of them as a wrong scale, zero point or layer would."""
    differs = (actual - reference).abs() > 1e-6
    assert float(differs.float().mean()) <= tie_fraction, f"{int(differs.sum())} of {differs.numel()} outputs differ"
    spread = float(reference.abs().max()) or 1.0
    assert float((actual - reference).abs().max()) <= 0.1 * spread
