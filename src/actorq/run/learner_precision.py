"""``trainer.precision=auto``: time the learner's update at fp32 and bf16-mixed here, run the faster.

Whether bf16 autocast speeds a learner up depends on the CPU and on the network's width:
with native bf16 (AVX512-BF16, AMX) a wide MLP's update runs faster, without it a
bf16 matmul is emulated and the update can be two orders of magnitude slower. So, as for the
actors' ``quant.bits=auto`` (:mod:`actorq.quant.auto`), the choice is measured, not guessed:
a few warm-up and timed updates of a copy of the real learner (its networks, optimizers and
batch size) on random replay-shaped samples, under each precision's Lightning context.
``32-true`` is kept unless ``bf16-mixed`` beats it by ``margin``, so ``auto`` is never more
than ``margin`` slower than the faster of the two. A learner with convolutional trunks is also
timed with its activations channels-last (:mod:`actorq.util.memory_format`) at each precision,
and runs the faster layout of the precision picked (again by ``margin``).

The timings are cached per device and learner shape (a JSON file in the user's cache
directory, ``$XDG_CACHE_HOME/actorq/learner_precision.json``, or ``$ACTORQ_CACHE_DIR``; delete
it to measure again), so
only the first run of an experiment on a machine pays the measurement. An explicit
``bf16-mixed`` on a CPU without native bf16 runs as asked, with one warning giving the
measured slowdown.

Example:
    >>> choose({"32-true": 30.0, "bf16-mixed": 10.0})
    ('bf16-mixed', 'bf16-mixed 10 ms/update vs 32-true 30 ms (3.00x faster)')
    >>> choose({"32-true": 30.0, "bf16-mixed": 29.0})[0]
    '32-true'
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from tensordict import TensorDict

from actorq.util.choice import MARGIN, fastest
from actorq.util.memory_format import has_layout_choice, set_channels_last
from actorq.util.atomic import write_text_atomically
from actorq.util.values import AUTO
from actorq.data.learner_ranks import launched_rank
from actorq.quant.timing import single_thread
from actorq.algos.batches import Sample

if TYPE_CHECKING:
    from actorq.algos.base import Learner

log = logging.getLogger(__name__)

FP32, BF16 = "32-true", "bf16-mixed"
CANDIDATES = (FP32, BF16)
CHANNELS_LAST = " channels-last"  # a candidate's suffix: that precision with channels-last activations
MICRO = " micro="  # a candidate's last suffix: its minibatch in parts of that many rows
BF16_NAMES = (BF16, "bf16")  # Lightning's alias
# Rank 0 hands its decision to the learner ranks Lightning starts (they inherit its environment).
RANK_ENV = "ACTORQ_LEARNER_PRECISION"
CACHE_VERSION = 2


@dataclasses.dataclass(frozen=True)
class LearnerPrecision:
    """The precision the learner runs at, and why (``summary.json``'s ``learner_precision``).

    Attributes:
        precision: a Lightning precision (``"32-true"``, ``"bf16-mixed"``, ...).
        choice: ``"auto"`` (measured here) or ``"configured"`` (``trainer.precision`` as given).
        reason: one line saying why.
        timings_ms: milliseconds per update of each candidate, where they were measured.
        cached: whether ``timings_ms`` came from an earlier run's measurement on this machine.
        channels_last: whether the learner's convolutional trunks run channels-last (measured
            with ``auto``).
        micro_batch_size: the rows per forward and backward pass of a minibatch the learner
            takes (PPO's ``algo.micro_batch_size=auto``, measured); ``None``: as configured.
    """

    precision: str
    choice: str
    reason: str
    timings_ms: dict[str, float] | None = None
    cached: bool = False
    channels_last: bool = False
    micro_batch_size: int | None = None

    def summary(self) -> dict:
        return dataclasses.asdict(self)

    def lay_out(self, learner) -> None:
        """Sets ``learner``'s convolutional trunks to the layout decided (default or channels-last),
        and its micro-batches where they were measured."""
        set_channels_last(learner, self.channels_last)
        if self.micro_batch_size is not None:
            learner.micro_batch_size = self.micro_batch_size


def choose(timings_ms: dict[str, float], margin: float = MARGIN) -> tuple[str, str]:
    """``(precision, reason)``: ``bf16-mixed`` if its update is faster than ``32-true``'s by
    ``margin``, else ``32-true`` (full precision where bf16 gains little or nothing).

    Example:
        >>> choose({"32-true": 10.0, "bf16-mixed": 400.0})
        ('32-true', '32-true 10 ms/update vs bf16-mixed 400 ms (40.00x slower)')
        >>> choose({"32-true": 10.0, "bf16-mixed": 9.8})
        ('32-true', '32-true 10 ms/update vs bf16-mixed 9.8 ms (within 5%: full precision kept)')
    """
    fp32, bf16 = timings_ms[FP32], timings_ms[BF16]
    if fastest(timings_ms, FP32, margin) == BF16:
        return BF16, f"{BF16} {bf16:.3g} ms/update vs {FP32} {fp32:.3g} ms ({fp32 / bf16:.2f}x faster)"
    if bf16 < fp32:
        return FP32, f"{FP32} {fp32:.3g} ms/update vs {BF16} {bf16:.3g} ms (within {margin:.0%}: full precision kept)"
    return FP32, f"{FP32} {fp32:.3g} ms/update vs {BF16} {bf16:.3g} ms ({bf16 / fp32:.2f}x slower)"


def resolve_learner_precision(precision: str | int, learner: Learner | None,
                              accelerator: str = "auto", saved: dict | None = None) -> LearnerPrecision:
    """What ``trainer.precision`` means for this learner here (see the module's docstring).

    Args:
        precision: ``trainer.precision``: ``"auto"`` or any Lightning precision.
        learner: the learner, complete (its networks, optimizers and batch size are timed on a
            copy; the learner itself and the global random state are left untouched).
        accelerator: ``trainer.accelerator``: where the learner's updates will run.
        saved: the decision a resumed run's plan holds (``plan.json``): where it was ``"auto"``'s
            and still is, kept untimed (timing again could switch precision in the middle of a run).

    Example:
        >>> resolve_learner_precision("32-true", learner=None).reason
        'trainer.precision=32-true as configured'
    """
    inherited = os.environ.get(RANK_ENV)
    if launched_rank() > 0 and inherited:  # a learner rank runs rank 0's decision
        return LearnerPrecision(**json.loads(inherited))
    if saved is not None and str(precision) == AUTO and saved.get("choice") == AUTO:
        kept = " (kept from the run's plan)"
        reason = saved["reason"] if saved["reason"].endswith(kept) else saved["reason"] + kept
        decided = dataclasses.replace(LearnerPrecision(**saved), reason=reason)
    else:
        decided = with_micro_batches(_decide(str(precision), learner, accelerator), learner, accelerator)
    os.environ[RANK_ENV] = json.dumps(decided.summary())
    return decided


def with_micro_batches(decided: LearnerPrecision, learner, accelerator: str) -> LearnerPrecision:
    """``decided`` with the micro-batch size a learner that asks for it (``micro_batch_size``
    ``"auto"``) runs fastest at, at the precision and layout decided: its whole minibatch, or
    a half or a quarter of it (32 rows at least), timed as :func:`time_updates` times; a part
    is kept only where it beats the whole minibatch by ``MARGIN``."""
    device = learner_device(accelerator)
    if getattr(learner, "micro_batch_size", None) != AUTO or device is None:
        return decided
    whole = decided.precision + (CHANNELS_LAST if decided.channels_last else "")
    sizes = [size for size in (learner.minibatch_size // 2, learner.minibatch_size // 4) if size >= 32]
    names = (whole, *(f"{whole}{MICRO}{size}" for size in sizes))
    timings, _ = cached_timings(learner, device, names)
    best = min(names, key=timings.__getitem__)
    size = candidate(best)[2] if timings[best] <= (1.0 - MARGIN) * timings[whole] else learner.minibatch_size
    why = f"; micro-batches of {size} rows ({timings[best] / timings[whole]:.2f}x the whole minibatch's time)"
    log.info("algo.micro_batch_size=auto picked %d rows: %s", size,
             ", ".join(f"{name} {timings[name]:.3g} ms" for name in names))
    return dataclasses.replace(decided, reason=decided.reason + why, micro_batch_size=size,
                               timings_ms={**(decided.timings_ms or {}), **{name: timings[name] for name in names}})


def candidate(name: str) -> tuple[str, bool, int | None]:
    """``(precision, channels_last, micro_batch_size)`` of a timed candidate's name.

    Example:
        >>> candidate("bf16-mixed channels-last micro=128"), candidate("32-true")
        (('bf16-mixed', True, 128), ('32-true', False, None))
    """
    name, _, micro = name.partition(MICRO)
    return name.removesuffix(CHANNELS_LAST), name.endswith(CHANNELS_LAST), int(micro) if micro else None


def _decide(precision: str, learner, accelerator: str) -> LearnerPrecision:
    device = learner_device(accelerator)
    if precision == AUTO:
        if device is None:
            return LearnerPrecision(FP32, AUTO, f"not measured on accelerator {accelerator!r}: {FP32}")
        timings, cached = cached_timings(learner, device)
        per_precision, channels_last = faster_layouts(timings)
        picked, why = choose(per_precision)
        why += layout_reason(timings, picked, channels_last[picked])
        decided = LearnerPrecision(picked, AUTO, f"measured on {device_name(device)}: {why}", timings, cached,
                                   channels_last[picked])
        log.info("trainer.precision=auto picked %s: %s%s", picked, decided.reason, " (cached)" if cached else "")
        return decided
    configured = f"trainer.precision={precision} as configured"
    if precision in BF16_NAMES and device == "cpu" and native_bf16() is False:
        timings, cached = cached_timings(learner, device)
        ratio = timings[BF16] / timings[FP32]
        log.warning("trainer.precision=%s on a CPU without native bf16 (%s): its update measured %.2fx %s "
                    "than 32-true (%.3g vs %.3g ms); trainer.precision=auto picks the faster", precision,
                    device_name(device), ratio if ratio >= 1 else 1 / ratio, "slower" if ratio >= 1 else "faster",
                    timings[BF16], timings[FP32])
        return LearnerPrecision(precision, "configured", f"{configured}; no native bf16 on this CPU, "
                                f"bf16-mixed measured {ratio:.2f}x the time of 32-true", timings, cached)
    return LearnerPrecision(precision, "configured", configured)


def candidates(learner) -> tuple[str, ...]:
    """What ``auto`` times for ``learner``: each precision, and for a learner with
    convolutional trunks each precision channels-last too."""
    if learner is not None and has_layout_choice(learner):
        return (*CANDIDATES, *(name + CHANNELS_LAST for name in CANDIDATES))
    return CANDIDATES


def faster_layouts(timings_ms: dict[str, float], margin: float = MARGIN) -> tuple[dict[str, float], dict[str, bool]]:
    """``(ms, channels_last)`` per precision: its time at its faster layout, and whether that
    is channels-last (only where it beats the default layout by ``margin``).

    Example:
        >>> faster_layouts({"32-true": 10.0, "bf16-mixed": 8.0, "32-true channels-last": 6.0,
        ...                 "bf16-mixed channels-last": 7.9})
        ({'32-true': 6.0, 'bf16-mixed': 8.0}, {'32-true': True, 'bf16-mixed': False})
    """
    ms, channels_last = {}, {}
    for name in CANDIDATES:
        last = timings_ms.get(name + CHANNELS_LAST)
        channels_last[name] = last is not None and last <= (1.0 - margin) * timings_ms[name]
        ms[name] = last if channels_last[name] else timings_ms[name]
    return ms, channels_last


def layout_reason(timings_ms: dict[str, float], precision: str, channels_last: bool) -> str:
    """The reason's clause on the layout, where one was timed."""
    last = timings_ms.get(precision + CHANNELS_LAST)
    if last is None:
        return ""
    ratio = last / timings_ms[precision]
    return f"; channels-last {'kept' if channels_last else 'not kept'} ({ratio:.2f}x the default layout's time)"


def learner_device(accelerator: str) -> str | None:
    """``"cpu"`` or ``"cuda"``, where ``trainer.accelerator`` puts the learner; ``None`` for
    other accelerators (not measured)."""
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "cuda"
    return "cpu" if accelerator in ("auto", "cpu") else None


def native_bf16() -> bool | None:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX); ``None`` if unknown."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if not all(probes):
        return None
    return any(probe() for probe in probes)


def cpu_fields() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (``model name``, ``flags``, ...);
    empty where there is none."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    return fields


@functools.cache
def device_name(device: str) -> str:
    """The CPU's model (name, family and model number: virtual machines often name only the
    vendor) with its bf16 support, or the GPU's name: part of the cache key."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    fields = cpu_fields()
    model = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields:
        model += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    bf16 = {True: "native bf16", False: "no native bf16", None: "bf16 unknown"}[native_bf16()]
    return f"{model}, {bf16}"


def cached_timings(learner, device: str, names: tuple[str, ...] | None = None) -> tuple[dict[str, float], bool]:
    """``(timings_ms, cached)``: the cached timings of ``names`` (default: :func:`candidates`)
    for this learner's shape on this device, or fresh ones from :func:`time_updates`, then
    cached beside what the entry held."""
    key = cache_key(learner, device)
    path = cache_path()
    entries = _read_cache(path)
    cached = entries.get(key)
    names = names or candidates(learner)
    if isinstance(cached, dict) and all(isinstance(cached.get(name), (int, float)) for name in names):
        return {name: cached[name] for name in names}, True
    timings = time_updates(learner, precisions=names, device=device)
    entries[key] = {**(cached if isinstance(cached, dict) else {}), **timings}
    with contextlib.suppress(OSError):  # a read-only home: measure again next time
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps(entries, indent=1, sort_keys=True))
    return timings, False


CACHE_DIR_ENV = "ACTORQ_CACHE_DIR"  # where actorq keeps measurements; default: the user's cache dir


def cache_path() -> Path:
    """``$ACTORQ_CACHE_DIR/learner_precision.json``, else under ``$XDG_CACHE_HOME/actorq`` (or
    ``~/.cache/actorq``)."""
    base = os.environ.get(CACHE_DIR_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "actorq"
    return Path(base) / "learner_precision.json"


def _read_cache(path: Path) -> dict:
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def cache_key(learner, device: str) -> str:
    """Device, torch version, algorithm, batch size and every parameter's shape."""
    shapes = ";".join(f"{name}:{tuple(p.shape)}" for name, p in learner.named_parameters())
    digest = hashlib.sha1(shapes.encode()).hexdigest()[:12]
    micro = getattr(learner, "micro_batch_size", None)
    return (f"v{CACHE_VERSION} {device_name(device)} torch={torch.__version__} "
            f"{type(learner).__name__} batch={update_size(learner)} params={digest}"
            + (f" micro={micro}" if isinstance(micro, int) else ""))


def time_updates(
    learner,
    precisions: tuple[str, ...] = CANDIDATES,
    device: str = "cpu",
    updates: int | None = None,
    rounds: int = 2,
    max_rounds: int = 20,
    budget_s: float = 3.0,
    clear_loss: float = 4.0,
) -> dict[str, float]:
    """Milliseconds per update of ``learner`` at each precision (its best cycle's mean).

    Each precision updates its own copy of the learner: untimed warm-up updates until every
    optimizer has stepped (lazy optimizer state, kernel selection), then at least ``rounds``
    interleaved rounds of ``updates`` updates (default: one of the algorithm's cycles, as many
    updates as TD3's ``policy_delay``, one for the others), and more, up to ``max_rounds``,
    while ``budget_s`` lasts. On a shared machine a burst of load slows some updates; each
    precision keeps its fastest cycle's mean.

    On a CPU it runs on one thread, whatever the learner's thread count: the question is
    which kernels are faster, and a multi-threaded timing on a busy machine mostly measures
    the other jobs' scheduling, which stretches both precisions' updates alike and pushes
    their ratio towards 1 (docs/benchmarks.md, learner precision).

    A precision whose update takes over ``clear_loss`` times the fastest's, and so long that
    a round of it would spend a quarter of ``budget_s``, is not timed further: an emulated
    bf16 update of a wide network can take seconds, and nothing that close is left to decide.

    Example:
        >>> from actorq.algos.base import Exploration
        >>> from actorq.algos.td3 import TD3
        >>> from actorq.envs import EnvSpec
        >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
        >>> learner = TD3(spec, Exploration(0.1), actor_hidden=(16,), critic_hidden=(16,), batch_size=8)
        >>> sorted(time_updates(learner, rounds=1, max_rounds=1))
        ['32-true', 'bf16-mixed']
    """
    cycle = getattr(learner, "policy_delay", 1)  # updates until every network has stepped once
    updates = updates or cycle
    costly_ms = budget_s * 1e3 / (4 * updates)
    threads = single_thread() if device == "cpu" else contextlib.nullcontext()
    with threads, torch.random.fork_rng(devices=[] if device == "cpu" else None):  # the run's random stream stays
        samples = random_samples(learner, count=4, device=device)
        copies = {name: _detached_copy(learner, device, *candidate(name)[1:]) for name in precisions}
        contexts = {name: _train_step_context(candidate(name)[0], device) for name in precisions}
        for name in precisions:
            _run(copies[name], contexts[name], samples, cycle, device)
        best: dict[str, float] = {}
        deadline = time.perf_counter() + budget_s
        for done in range(max(rounds, max_rounds)):
            if done >= rounds and time.perf_counter() > deadline:
                break
            for name in precisions:
                give_up_above = max(clear_loss * min(best.values(), default=float("inf")), costly_ms)
                if best.get(name, 0.0) <= give_up_above:
                    times = _run(copies[name], contexts[name], samples, updates, device, give_up_above)
                    cycles = [sum(times[i:i + cycle]) / len(times[i:i + cycle]) for i in range(0, len(times), cycle)]
                    best[name] = min(best.get(name, float("inf")), *cycles)
    return {name: round(ms, 3) for name, ms in best.items()}


def random_samples(learner, count: int, device: str = "cpu") -> list[Sample] | list[dict[str, torch.Tensor]]:
    """``count`` replay samples of ``learner.batch_size`` random transitions of its env's shape,
    or for a learner that updates on minibatches of a rollout (PPO) ``count`` such minibatches."""
    spec, size = learner.spec, update_size(learner)
    generator = torch.Generator().manual_seed(0)

    def observations() -> torch.Tensor:
        if spec.pixels:
            return torch.randint(0, 256, (size, *spec.frame_shape), dtype=torch.uint8, generator=generator)
        return torch.randn(size, spec.obs_dim, generator=generator)

    def minibatch() -> dict[str, torch.Tensor]:
        action = one().batch["action"]
        return {"observation": observations().to(device), "action": action.to(device),
                "prox_log_prob": torch.zeros(size, device=device), "advantage": torch.randn(size, generator=generator).to(device),
                "return": torch.randn(size, generator=generator).to(device), "weight": torch.ones(size, device=device)}

    def one() -> Sample:
        if spec.discrete:
            action = torch.randint(spec.num_actions, (size,), generator=generator)
        else:
            low, high = torch.tensor(spec.action_low), torch.tensor(spec.action_high)
            action = low + (high - low) * torch.rand(size, spec.action_dim, generator=generator)
        batch = TensorDict({"observation": observations(), "action": action,
                            "reward": torch.randn(size, generator=generator),
                            "next_observation": observations(),
                            "discount": torch.full((size,), learner.gamma)}, batch_size=[size])
        return Sample(batch.to(device), torch.arange(size), torch.ones(size, device=device))

    return [minibatch() if on_minibatches(learner) else one() for _ in range(count)]


def on_minibatches(learner) -> bool:
    """Whether ``learner`` updates on minibatches of a rollout (PPO) rather than replay samples."""
    return hasattr(learner, "update_minibatch")


def update_size(learner) -> int:
    """The transitions one update of ``learner`` reads: its batch, or its minibatch."""
    return learner.minibatch_size if on_minibatches(learner) else learner.batch_size


def without_trainer(learner, optimizers: list[torch.optim.Optimizer]) -> None:
    """Rebinds, on this learner object only, the Trainer services an update uses (optimizers,
    schedulers, which stay put, backward and priorities)."""
    learner.optimizers = lambda: optimizers if len(optimizers) > 1 else optimizers[0]
    learner.lr_schedulers = lambda: None  # the learning rate stays put
    learner.manual_backward = lambda loss: loss.backward()
    learner.feed_priorities = lambda sample, td_error: None


def _detached_copy(learner, device: str, channels_last: bool = False, micro_batch_size: int | None = None):
    clone = set_channels_last(copy.deepcopy(learner).to(device), channels_last)
    if micro_batch_size is not None or getattr(clone, "micro_batch_size", None) == AUTO:
        clone.micro_batch_size = micro_batch_size  # a candidate's, else the whole minibatch for "auto"
    without_trainer(clone, clone.make_optimizers())
    return clone


def _train_step_context(precision: str, device: str):
    """Lightning's own context for a training step at ``precision`` (bf16 autocast or none)."""
    plugin = MixedPrecision(precision, device) if precision.endswith("-mixed") else Precision()
    return plugin.train_step_context


def _run(learner, context, samples: list[Sample], updates: int, device: str,
         stop_above: float = float("inf")) -> list[float]:
    """Milliseconds of each of ``updates`` updates made as the learner's loop makes them;
    fewer once one took over ``stop_above`` ms."""
    times = []
    while len(times) < updates and not (times and times[-1] > stop_above):
        start = time.perf_counter()
        sample = samples[learner.learner_steps % len(samples)]
        with context():
            if on_minibatches(learner):
                learner.update_minibatch(sample)  # counts its step itself
            else:
                learner.update(sample)
                learner.learner_steps += 1
                if learner.learner_steps % learner.target_update_period == 0:
                    learner.update_targets()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return times
