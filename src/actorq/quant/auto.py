"""``quant.bits=auto``: time each precision on this CPU and keep the fastest faithful one.

int8 wins big for wide networks and loses for narrow ones at batch 1, and bf16 depends on
the CPU; so the choice is measured, not guessed. fp32 is always a candidate and is kept
unless another candidate is clearly faster (by ``margin``) and its action error is within
``QuantSpec.auto_tolerance``: ``auto`` is never slower than fp32.

Where it runs: in the main process, once, before the actor pool is built, on the learner's
initial fp32 network, single-threaded, at the workers' real batch (``envs_per_worker``). With
local worker processes this is the same CPU the actors run on. Its result is a concrete
:class:`QuantSpec` used both by the learner's quantizer and by the actors' template, which
must agree on the payload format.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import DeterministicActor
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> actor = DeterministicActor(spec, hidden=(32, 32))
    >>> choice = select_precision(actor, QuantSpec(bits="auto"), batch_size=1, iterations=30)
    >>> choice.name in choice.timings_us and "fp32" in choice.timings_us
    True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import torch
from torch import nn

from actorq.util.choice import MARGIN, fastest
from actorq.util.errors import ConfigError
from actorq.quant import _ao, codecs, onednn
from actorq.quant.codecs import full_precision, registered
from actorq.quant.conv import first_stage
from actorq.quant.fidelity import action_error
from actorq.quant.layout import TrunkLayout
from actorq.quant.module_layout import ModuleLayout, layout_of
from actorq.quant.network import QuantizedNetwork
from actorq.quant.spec import QuantSpec
from actorq.quant.timing import time_forward

log = logging.getLogger(__name__)
REFERENCE = full_precision().name  # "fp32": every candidate is compared with it


@dataclass(frozen=True)
class PrecisionChoice:
    """The outcome of :func:`select_precision`, for logging.

    Attributes:
        name: the chosen candidate, a codec's name (``"fp32"``, ``"bf16"``,
            ``"int8_static_fp32_ends"``, ``"int8_dynamic"``), with ``_onednn`` for that engine.
        spec: the concrete precision to run.
        timings_us: median microseconds per forward of every candidate.
        action_errors: :func:`~actorq.quant.action_error` of every candidate vs fp32.
        batch_size: the batch the timings were taken at.
    """

    name: str
    spec: QuantSpec
    timings_us: dict[str, float]
    action_errors: dict[str, float]
    batch_size: int

    def metrics(self) -> dict[str, float]:
        """``quant/auto_us/<candidate>`` and ``quant/auto_action_error/<candidate>``."""
        out = {f"quant/auto_us/{name}": us for name, us in self.timings_us.items()}
        out.update({f"quant/auto_action_error/{name}": err for name, err in self.action_errors.items()})
        out["quant/auto_speedup"] = self.timings_us[REFERENCE] / self.timings_us[self.name]
        return out


def candidate_specs(spec: QuantSpec, convolutional: bool = False, fp32_first_stage: bool = False) -> dict[str, QuantSpec]:
    """The precisions ``auto`` compares: one per registered codec that is an
    ``auto_candidate``, keeping ``spec``'s observer and granularity, and an int8-kernel codec
    once per int8 engine worth trying here besides the one ``spec`` runs (torch.ao's default
    ``x86`` and ``onednn``, and ``plain``: :mod:`actorq.quant.onednn`,
    :mod:`actorq.quant.plain_conv`; ``quant.engine=null`` runs ``plain`` on a convolutional
    trunk, ``x86`` on an MLP: :func:`actorq.quant.onednn.default_engine`). Each is named by
    its codec, plus ``_<engine>`` for the other engines.

    A ``convolutional`` trunk gets the codecs that run one and, if it has a first stage that
    ``int8_static_fp32_ends`` keeps in fp32 (``fp32_first_stage``), every int8-kernel codec
    among them: ``int8_static`` quantizes that stage, and which is faster depends on the CPU.
    Without one, the two int8 copies differ only in the thin output layer, which the
    candidate keeps in fp32 for its outputs' sake, and only the candidate is timed."""
    codecs = [codec for codec in registered() if _candidate(codec, convolutional, fp32_first_stage)]
    runs = spec.engine or onednn.default_engine(convolutional) or _ao.DEFAULT_ENGINE
    others = dict.fromkeys([*(e for e in (_ao.DEFAULT_ENGINE, "onednn") if e in _ao.ENGINES), *onednn.engines()])
    engines = [spec.engine] + [e for e in others if e != runs]
    candidates = {}
    for engine in engines:
        suffix = "" if engine == spec.engine else f"_{engine}"
        for codec in codecs:
            if engine == spec.engine or codec.int8_kernels:
                candidates[f"{codec.name}{suffix}"] = replace(codec.candidate_spec(spec), engine=engine)
    return candidates


def _candidate(codec, convolutional: bool, fp32_first_stage: bool) -> bool:
    if convolutional:
        return codec.runs_modules and (codec.auto_candidate or (codec.int8_kernels and fp32_first_stage))
    return codec.auto_candidate


def choose(
    timings_us: dict[str, float], action_errors: dict[str, float], tolerance: float, margin: float = MARGIN
) -> str:
    """The fastest candidate within ``tolerance``, if it beats fp32 by ``margin``; else fp32.

    Example:
        >>> choose({"fp32": 100.0, "int8_static": 20.0}, {"fp32": 0.0, "int8_static": 0.01}, 0.05)
        'int8_static'
        >>> choose({"fp32": 100.0, "int8_static": 98.0}, {"fp32": 0.0, "int8_static": 0.0}, 0.05)
        'fp32'
    """
    faithful = {name: time for name, time in timings_us.items() if action_errors.get(name, 0.0) <= tolerance}
    return fastest({**faithful, REFERENCE: timings_us[REFERENCE]}, REFERENCE, margin)


def select_precision(
    network: nn.Module,
    spec: QuantSpec,
    batch_size: int,
    observations: torch.Tensor | None = None,
    discrete: bool = False,
    iterations: int = 300,
    rounds: int = 3,
    margin: float = MARGIN,
) -> PrecisionChoice:
    """Times every candidate precision on one thread and picks one (see :func:`choose`).

    Args:
        network: the learner's fp32 policy (``trunk`` + ``head``): an MLP trunk, or a
            convolutional one (then only the codecs that run one are candidates).
        spec: the configured spec (its observer, granularity and ``auto_tolerance`` are used).
        batch_size: observations per forward in an actor (``envs_per_worker``).
        observations: representative observations for calibration and action error; if
            ``None``, standard normal vectors or, for a convolutional trunk, uniformly random
            frames (less representative: prefer a few env steps' worth).
        discrete: whether the network outputs Q-values.
        iterations: timed forwards per candidate, spread over ``rounds`` interleaved rounds
            (each candidate keeps its best round, so a burst of load does not decide).
        margin: how much faster than fp32 a candidate must be.
    """
    layout = layout_of(network.trunk)
    convolutional = isinstance(layout, ModuleLayout)
    candidates = candidate_specs(spec, convolutional, convolutional and bool(first_stage(layout.architecture)))
    if observations is None:
        observations = random_inputs(layout, spec.calibration_samples)
    batch = actor_batch(observations, batch_size)
    networks = {
        name: QuantizedNetwork.from_network(network, candidate, calibration=observations)
        for name, candidate in candidates.items()
    }
    errors = {name: action_error(network, net, observations, discrete) for name, net in networks.items()}
    timings = measure_timings(networks, batch, iterations, rounds)
    name = choose(timings, errors, spec.auto_tolerance, margin)
    return PrecisionChoice(name, networks[name].quant, timings, errors, batch_size)


def actor_batch(observations: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``batch_size`` rows of ``observations`` (cycled if there are fewer): one actor's forward."""
    return observations[torch.arange(batch_size) % len(observations)]


def random_inputs(layout: TrunkLayout | ModuleLayout, count: int) -> torch.Tensor:
    """``count`` made-up observations for ``layout``'s trunk: standard normal vectors, or
    uniformly random uint8 frames."""
    if isinstance(layout, ModuleLayout):
        return torch.randint(0, 256, (count, *layout.input_shape), dtype=layout.input_dtype)
    return torch.randn(count, layout.sizes[0])


def measure_timings(
    networks: dict[str, nn.Module], batch: torch.Tensor, iterations: int = 300, rounds: int = 3
) -> dict[str, float]:
    """Median microseconds per forward of each network on ``batch``: ``iterations`` forwards
    spread over ``rounds`` interleaved rounds, each network keeping its best round.

    The measuring half of :func:`select_precision` (:func:`choose` is the deciding half), so
    a test can give the decision timings instead of racing the clock.

    Example:
        >>> timings = measure_timings({"identity": nn.Identity()}, torch.zeros(1, 3), iterations=10, rounds=2)
        >>> list(timings), timings["identity"] > 0
        (['identity'], True)
    """
    timings = {name: float("inf") for name in networks}
    per_round = max(iterations // rounds, 5)
    for _ in range(rounds):
        for name, net in networks.items():
            timings[name] = min(timings[name], time_forward(net, batch, iterations=per_round).median_us)
    return timings


def resolve_precision(
    network: nn.Module,
    spec: QuantSpec,
    batch_size: int,
    observations: torch.Tensor | None = None,
    discrete: bool = False,
) -> tuple[QuantSpec, PrecisionChoice | None]:
    """``spec`` itself, or for ``bits="auto"`` the spec :func:`select_precision` picks, with the
    engine ``quant.engine=null`` runs named (:func:`named_engine`; for an MLP's int8 copy,
    measured at ``batch_size`` on ``observations``).

    Example:
        >>> spec, choice = resolve_precision(torch.nn.Identity(), QuantSpec(bits=8), batch_size=1)
        >>> spec.describe(), choice
        ('int8 dynamic per_channel fp32-ends', None)
    """
    if not spec.is_auto:
        return named_engine(network, spec, batch_size, observations), None
    choice = select_precision(network, spec, batch_size, observations, discrete)
    return named_engine(network, choice.spec), choice  # (auto timed the engines: no second timing)


def named_engine(network: nn.Module, spec: QuantSpec, batch_size: int | None = None,
                 observations: torch.Tensor | None = None) -> QuantSpec:
    """``spec`` with ``quant.engine=null`` named where it runs int8 kernels, so that what a run
    saves in its checkpoints and prints says which copy its actors ran: ``plain`` for a
    convolutional trunk (:func:`actorq.quant.onednn.default_engine`); for an MLP, with
    ``batch_size``, the faster of its copy on plain int8 tensors and on torch.ao's default
    engine, timed at that batch (:func:`faster_engine`), else torch.ao's default engine (or
    ``plain`` in a torch without torch.ao's engines)."""
    trunk = getattr(network, "trunk", None)
    if spec.engine is not None or spec.is_auto or trunk is None or not codecs.select(spec).int8_kernels:
        return spec
    convolutional = isinstance(layout_of(trunk), ModuleLayout)
    engine = onednn.default_engine(convolutional)
    if engine is None and batch_size is not None and onednn.available():
        engine = faster_engine(network, spec, batch_size, observations)
    engine = engine or (_ao.DEFAULT_ENGINE if _ao.ENGINES else None)
    return replace(spec, engine=engine)  # (None: this torch has neither: the codec says so when it builds)


def faster_engine(network: nn.Module, spec: QuantSpec, batch_size: int, observations: torch.Tensor | None = None,
                  iterations: int = 150, rounds: int = 3) -> str:
    """The engine an MLP's int8 copy at ``spec`` runs faster on at ``batch_size``: ``plain``
    (the kernels PyTorch keeps) unless torch.ao's default engine is faster by the margin
    :func:`~actorq.util.choice.fastest` asks; torch.ao's where the plain copy cannot be built
    (its calibration has no plain form) or has no int8 layer (fp32 ends and nothing between). On the CPUs measured so far torch.ao's won
    (docs/measured/quantization.md): a CPU whose oneDNN kernels are faster (AMX) runs plain."""
    legacy = _ao.DEFAULT_ENGINE
    if observations is None:
        observations = random_inputs(layout_of(network.trunk), spec.calibration_samples)
    try:
        networks = {engine: QuantizedNetwork.from_network(network, replace(spec, engine=engine), observations)
                    for engine in (onednn.PLAIN, legacy)}
    except ConfigError:
        return legacy
    if not any(isinstance(module, (onednn.Int8Linear, onednn.DynamicInt8Linear))
               for module in networks[onednn.PLAIN].executable_trunk().modules()):
        return legacy  # all fp32 (fp32 ends with nothing between them): no int8 kernel to choose
    batch = actor_batch(observations, batch_size)
    timings = measure_timings(networks, batch, iterations, rounds)
    engine = fastest(timings, onednn.PLAIN, MARGIN)
    log.info("quant.engine=null picked %s for the MLP's int8 copy (%s), per forward at batch %d: %.0f µs on plain "
             "int8 tensors, %.0f µs on torch.ao's %s (plain unless torch.ao's is %.0f%% faster)", engine,
             spec.describe(), batch_size, timings[onednn.PLAIN], timings[legacy], legacy, 100 * MARGIN)
    return engine
