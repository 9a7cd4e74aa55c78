"""What precision the actors run at: :class:`QuantSpec`, validated when it is built.

The allowed ``bits`` and ``mode`` values come from the codec registry
(:mod:`actorq.quant.codecs`), the allowed ``calibration`` observers from
``_ao.CALIBRATION_OBSERVERS``; the spec's codec formats and describes it.

Example:
    >>> QuantSpec(bits=8, mode="dynamic").describe()
    'int8 dynamic per_channel fp32-ends'
    >>> QuantSpec(bits=4, mode="static")
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: quant.bits=4 is simulated weight-only quantization and needs quant.mode=dynamic; quant.mode=static (calibrated activations, real int8 kernels) needs quant.bits=8
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from typing import TYPE_CHECKING

from actorq.util.values import AUTO
from actorq.util.errors import ConfigError
from actorq.quant import _ao, codecs, onednn

if TYPE_CHECKING:
    from actorq.quant.codecs import Codec

OBSERVERS = ("learned", "fixed")
GRANULARITIES = ("per_tensor", "per_channel")


@dataclass(frozen=True)
class QuantSpec:
    """Precision of the actors' copy of the policy (the ``quant.*`` config group).

    Attributes:
        bits: 32 (fp32, unchanged), 16 (bfloat16), 8 (int8 torch.ao kernels), 2..7 (weights
            rounded to that many bits, computed in fp32: a simulation, as in QuaRL's precision
            sweeps; ``bits=4, format="int4_packed"``: really packed two codes to a byte) or
            ``"auto"`` (pick the fastest faithful one, see
            :func:`actorq.quant.select_precision`).
        mode: for ``bits=8`` (the layers between the first and the last ``Linear`` in int8):
            ``"dynamic"`` (the default: activations quantized over each forward's own range) or
            ``"static"`` (activation ranges calibrated before the push, clipped beyond them).
            ``bits=2..7`` need ``"dynamic"`` (weights only). Ignored for 32/16.
        observer: for ``mode=static``: ``"learned"`` (ranges measured at every push on
            recent observations with the ``calibration`` observer) or ``"fixed"`` (ranges set
            once from ``input_range`` and ``activation_max``; no data needed).
        calibration: the learned observer: ``"minmax"``, ``"moving_average"`` or
            ``"histogram"``.
        granularity: one weight scale per ``"per_tensor"`` or per output ``"per_channel"``.
        input_range: fixed observer: the observation range ``(low, high)`` mapped onto int8.
        activation_max: fixed observer: hidden activations are taken to lie in
            ``[0, activation_max]`` and the trunk's output in ``[-activation_max, activation_max]``.
        calibration_samples: how many recent observations a push calibrates on.
        auto_tolerance: ``bits="auto"`` keeps only candidates whose action error
            (:func:`actorq.quant.action_error`) is at most this.
        format: a codec's name (:mod:`actorq.quant.codecs`), to pick one that ``bits`` and
            ``mode`` alone do not (a codec registered with ``implicit = False``); ``None``:
            the codec serving ``bits`` and ``mode``.
        engine: for ``bits=8``: the int8 kernels the actors run: ``"plain"``, plain int8
            tensors on oneDNN's kernels (:mod:`actorq.quant.onednn`,
            :mod:`actorq.quant.plain_conv`), or a torch.ao engine's quantized modules
            (``"x86"``, ``"fbgemm"``, ``"onednn"``, ``"qnnpack"``, as this torch build has
            them); ``None``: ``plain`` for a convolutional trunk (faster here:
            docs/measured/pixels.md); for an MLP, timed at the actors' batch when a run
            starts, ``plain`` unless torch.ao's ``x86`` is clearly faster (it was on the CPUs
            measured: docs/measured/quantization.md); a run names the one it used
            (:func:`actorq.quant.auto.named_engine`). Which is fastest depends on the CPU and
            the batch (``onednn`` uses AMX int8 units where the CPU has them); ``bits=auto``
            measures it.
        max_kl: the divergence budget of a stochastic policy's copy: a push whose measured
            ``KL(mu || pi)`` (the mean over held-out recent observations,
            :func:`actorq.quant.policy_divergence`) exceeds it goes out at the first of
            ``fallback_bits`` that meets it (the last if none does), counted in
            ``quant/fallbacks``; ``None``: no budget. Policies without a KL (Q-networks,
            deterministic actors) are not bounded by it.
        fallback_bits: the precisions a push over ``max_kl`` tries, in order; those not above
            ``bits`` are skipped (an fp32 copy is the policy itself).
    """

    bits: int | str = 8
    mode: str = "dynamic"
    observer: str = "learned"
    calibration: str = "minmax"
    granularity: str = "per_channel"
    input_range: tuple[float, float] = (-10.0, 10.0)
    activation_max: float = 20.0
    calibration_samples: int = 512
    auto_tolerance: float = 0.05
    format: str | None = None
    engine: str | None = None
    max_kl: float | None = 0.01
    fallback_bits: tuple[int, ...] = (32,)

    def __post_init__(self) -> None:
        # Hydra hands over lists as ListConfig; keep the dataclass hashable and picklable.
        object.__setattr__(self, "input_range", _pair(self.input_range))
        object.__setattr__(self, "fallback_bits", _fallback_bits(self.fallback_bits))
        if self.bits == AUTO and self.format is not None:
            raise ConfigError(f"quant.bits=auto picks a format itself; drop quant.format={self.format}")
        if self.bits != AUTO and self.format is None:
            codecs.check_bits(self.bits)
        _check_choice("mode", self.mode, codecs.modes())
        _check_choice("observer", self.observer, OBSERVERS)
        _check_choice("calibration", self.calibration, tuple(_ao.CALIBRATION_OBSERVERS))
        _check_choice("granularity", self.granularity, GRANULARITIES)
        if self.engine is not None:
            _check_choice("engine", self.engine, (*_ao.ENGINES, *onednn.engines()))
        if self.bits != AUTO:
            codecs.select(self)  # a codec serves these bits, mode and format
        low, high = self.input_range
        if not low < high:
            raise ConfigError(
                f"quant.input_range must be [low, high] with low < high, got {list(self.input_range)}"
            )
        _check_positive("activation_max", self.activation_max)
        _check_positive("calibration_samples", self.calibration_samples)
        if self.auto_tolerance < 0:
            raise ConfigError(f"quant.auto_tolerance must be >= 0, got {self.auto_tolerance}")
        if self.max_kl is not None:
            _check_positive("max_kl", self.max_kl)

    @property
    def is_auto(self) -> bool:
        return self.bits == AUTO

    @property
    def codec(self) -> Codec:
        """The codec that runs this spec (see :mod:`actorq.quant.codecs`).

        Looked up in the registry on each call (a few microseconds), not stored: the spec's
        ``__dict__`` stays its fields, which callers splat into ``QuantSpec(**...)``.
        """
        return codecs.select(self)

    @property
    def is_full_precision(self) -> bool:
        """The actors run the learner's fp32 policy unchanged (the codec says so)."""
        return not self.is_auto and self.codec.full_precision

    @property
    def is_static(self) -> bool:
        """Activations are quantized with calibrated ranges, so a push needs them."""
        return not self.is_auto and self.codec.calibrated

    @property
    def needs_calibration(self) -> bool:
        """A push must pass recent observations to :func:`actorq.quant.quantize`."""
        return self.is_static and self.observer == "learned"

    def describe(self) -> str:
        """A short human-readable name, e.g. ``"int8 static per_channel"`` (the codec's)."""
        if self.is_auto:
            return "auto"
        return self.codec.describe(self)

    def fallbacks(self) -> tuple[QuantSpec, ...]:
        """The specs a push over ``max_kl`` falls back to, in order: each of ``fallback_bits``
        above ``bits`` (none without a budget, or for an unresolved ``bits=auto``).

        >>> [spec.describe() for spec in QuantSpec(bits=8, fallback_bits=(16, 32)).fallbacks()]
        ['bf16', 'fp32']
        >>> QuantSpec(bits=32).fallbacks(), QuantSpec(bits=8, max_kl=None).fallbacks()
        ((), ())
        """
        if self.max_kl is None or self.is_auto:
            return ()
        return tuple(self.with_bits(bits) for bits in self.fallback_bits if bits > self.bits)

    def with_bits(self, bits: int | str, mode: str | None = None) -> QuantSpec:
        """A copy with other ``bits`` and no ``format``, everything else unchanged; ``mode``
        by default this spec's if the codec serving ``bits`` runs it, else one it runs."""
        return replace(self, bits=bits, mode=mode or codecs.mode_for(bits, self.mode), format=None)


def _pair(values: Sequence[float]) -> tuple[float, float]:
    pair = tuple(float(v) for v in values)
    if len(pair) != 2:
        raise ConfigError(f"quant.input_range must be [low, high], got {list(values)}")
    return pair  # type: ignore[return-value]


def _fallback_bits(values: Sequence[int]) -> tuple[int, ...]:
    bits = tuple(int(b) for b in values)
    for b in bits:
        if b not in (8, 16, 32):
            raise ConfigError(f"quant.fallback_bits takes 8, 16 and 32 (int8, bf16, fp32), got {list(values)}")
    if list(bits) != sorted(set(bits)):
        raise ConfigError(f"quant.fallback_bits must rise, each once, got {list(values)}")
    return bits


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"quant.{name} must be one of {', '.join(allowed)}; got {value!r}")


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"quant.{name} must be positive, got {value}")
