"""The :class:`Codec` interface and the registry that finds the codec for a ``QuantSpec``."""

from __future__ import annotations

import dataclasses
import math

from typing import TYPE_CHECKING, ClassVar, TypeVar

import torch
from torch import nn

from actorq.util.values import AUTO, is_int
from actorq.util.errors import ConfigError
from actorq.quant.codecs._parts import stored_weights
from actorq.quant.layout import Payload, PayloadSpec, TrunkLayout
from actorq.quant.module_layout import ModuleLayout

Layout = TrunkLayout | ModuleLayout
"""What a codec runs: an MLP trunk's layout, or any other trunk's (a convolutional one)."""

if TYPE_CHECKING:
    from actorq.quant.spec import QuantSpec


class Codec:
    """One precision format: how a trunk becomes a payload of plain tensors, and back.

    Subclass it, set the class attributes, implement :meth:`describe`, :meth:`payload_spec`,
    :meth:`encode` and :meth:`decode` (and :meth:`dequantized_weights` for weights stored
    otherwise than as fp32/bf16 or int8 codes), and decorate the class with :func:`register`.

    Attributes:
        name: the format's name (``QuantSpec(format=name)`` selects it explicitly).
        bits: the ``quant.bits`` values it serves (``()``: any, bits are then not checked).
        modes: the ``quant.mode`` values it serves (``()``: any, the mode is ignored).
        bits_help: how ``quant.bits``'s error message lists it, e.g. ``"16 (bf16)"``.
        implicit: chosen by ``bits``/``mode`` alone (no two implicit codecs may serve the
            same ones); ``False``: only by ``QuantSpec(format=name)``.
        int8_kernels: actors run real int8 kernels packed for ``quant.engine``; ``auto`` times
            such a codec once per engine worth trying.
        calibrated: activation ranges are calibrated at every push (``QuantSpec.is_static``).
        full_precision: actors run the learner's fp32 policy unchanged
            (``QuantSpec.is_full_precision``): nothing to compare it with, nothing to quantize.
        auto_candidate: ``quant.bits=auto`` times this codec and may pick it (see
            :func:`actorq.quant.auto.candidate_specs`).
        runs_modules: it also runs trunks that are not MLPs (a convolutional policy's
            :class:`~actorq.quant.module_layout.ModuleLayout`).
    """

    name: ClassVar[str]
    bits: ClassVar[tuple[int, ...]] = ()
    modes: ClassVar[tuple[str, ...]] = ()
    bits_help: ClassVar[str | None] = None
    implicit: ClassVar[bool] = True
    int8_kernels: ClassVar[bool] = False
    calibrated: ClassVar[bool] = False
    full_precision: ClassVar[bool] = False
    auto_candidate: ClassVar[bool] = False
    runs_modules: ClassVar[bool] = False

    def serves(self, spec: QuantSpec) -> bool:
        """Whether this codec runs ``spec`` (its bits and mode)."""
        return (not self.bits or spec.bits in self.bits) and (not self.modes or spec.mode in self.modes)

    def refusal(self, spec: QuantSpec) -> str:
        """The one-line ``ConfigError`` message when ``spec`` names this codec's bits but not its mode."""
        return f"quant.bits={spec.bits} ({self.name}) needs quant.mode={' or '.join(self.modes)}, got {spec.mode}"

    def fits(self, layout: Layout, spec: QuantSpec | None = None) -> None:
        """Raises ``ConfigError`` if this format cannot run ``layout``: a convolutional trunk
        where the codec runs MLPs only, or what :meth:`check_layout` refuses."""
        if isinstance(layout, ModuleLayout):
            if not self.runs_modules:
                what = spec.describe() if spec is not None else self.name
                raise ConfigError(f"{what} has no kernels for a convolutional policy: use quant.bits=8 "
                                  "quant.mode=static (int8) or quant.bits=32")
            if self.calibrated and spec is not None and spec.observer == "fixed":
                raise ConfigError("quant.observer=fixed sets MLP activation ranges; a convolutional policy's are "
                                  "calibrated on frames: use quant.observer=learned")
            return
        self.check_layout(layout)

    def check_layout(self, layout: TrunkLayout) -> None:
        """Raises ``ConfigError`` naming the module if this format cannot run the MLP ``layout``."""

    def describe(self, spec: QuantSpec) -> str:
        """A short human-readable name, e.g. ``"int8 static per_channel"``."""
        return self.name

    def payload_spec(self, layout: TrunkLayout, spec: QuantSpec) -> PayloadSpec:
        """Names, shapes and dtypes of every payload tensor."""
        raise NotImplementedError

    def payload_nbytes(self, layout: TrunkLayout, spec: QuantSpec) -> int:
        """Bytes of a payload for ``spec`` (what every push copies to every actor)."""
        return sum(math.prod(shape) * dtype.itemsize for shape, dtype in self.payload_spec(layout, spec).values())

    def encode(
        self, trunk: nn.Sequential, layout: TrunkLayout, spec: QuantSpec, calibration: torch.Tensor | None
    ) -> Payload:
        """Learner side: an fp32 trunk (+ calibration observations) -> a payload (detached copies)."""
        raise NotImplementedError

    def decode(self, layout: TrunkLayout, spec: QuantSpec, payload: Payload) -> nn.Sequential:
        """Worker side: a payload -> the runnable trunk (fp32 in, fp32 out)."""
        raise NotImplementedError

    def dequantized_weights(self, layout: TrunkLayout, spec: QuantSpec, payload: Payload) -> list[torch.Tensor]:
        """Every layer's fp32 weight matrix as the actors see it (what ``quant/weight_error``
        compares with the learner's). The default reads float weights and int8 codes."""
        return stored_weights(layout, payload)

    def candidate_spec(self, spec: QuantSpec) -> QuantSpec:
        """The spec ``auto`` times for this codec: ``spec``'s settings at this codec's bits and mode."""
        mode = spec.mode if not self.modes or spec.mode in self.modes else self.modes[0]
        return dataclasses.replace(spec, bits=max(self.bits), mode=mode, format=None if self.implicit else self.name)

    def reference(
        self, trunk: nn.Sequential, spec: QuantSpec, calibration: torch.Tensor | None
    ) -> nn.Module | None:
        """The backend's own converted trunk, if there is one (int8: torch.ao), else None."""
        return None

    def __repr__(self) -> str:
        return f"<codec {self.name}>"


_REGISTRY: dict[str, Codec] = {}
C = TypeVar("C", bound=type[Codec])


def register(cls: C) -> C:
    """Class decorator: adds a codec to the registry (undo with :func:`unregister`)."""
    codec = cls()
    if codec.name in _REGISTRY:
        raise ValueError(f"a codec named {codec.name!r} is already registered")
    if codec.implicit:
        if not codec.bits:
            raise ValueError(f"codec {codec.name}: an implicit codec must list the bits it serves")
        for other in _REGISTRY.values():
            if other.implicit and _overlap(codec, other):
                raise ValueError(
                    f"codec {codec.name} serves the same quant.bits/mode as {other.name}; set "
                    "implicit = False and select it with QuantSpec(format=...)"
                )
    _REGISTRY[codec.name] = codec
    return cls


def unregister(name: str) -> None:
    """Removes a codec registered with :func:`register`."""
    del _REGISTRY[name]


def registered() -> tuple[Codec, ...]:
    """Every codec, in registration order."""
    return tuple(_REGISTRY.values())


def full_precision() -> Codec:
    """The codec whose actors run the learner's fp32 policy unchanged (``fp32``)."""
    return next(codec for codec in _REGISTRY.values() if codec.full_precision)


def codec_for(spec: QuantSpec) -> Codec:
    """The codec that runs ``spec`` (``bits="auto"`` must be resolved first)."""
    return spec.codec


def select(spec: QuantSpec) -> Codec:
    """Finds the codec for a spec's ``format`` or ``bits``/``mode``; ``ConfigError`` if none."""
    if spec.bits == AUTO:
        raise ConfigError("quant.bits=auto must be resolved with actorq.quant.select_precision first")
    if spec.format is not None:
        codec = _REGISTRY.get(spec.format)
        if codec is None:
            raise ConfigError(f"quant.format must be one of {', '.join(_REGISTRY)}; got {spec.format!r}")
        if codec.bits and spec.bits not in codec.bits:
            raise ConfigError(
                f"quant.format={codec.name} serves quant.bits={'/'.join(map(str, codec.bits))}, got {spec.bits!r}"
            )
        if not codec.serves(spec):
            raise ConfigError(codec.refusal(spec))
        return codec
    check_bits(spec.bits)
    implicit = [codec for codec in _REGISTRY.values() if codec.implicit]
    for codec in implicit:
        if codec.serves(spec):
            return codec
    raise ConfigError(next(codec for codec in implicit if spec.bits in codec.bits).refusal(spec))


def check_bits(bits: object) -> None:
    """``ConfigError`` unless some codec serves ``bits`` without being named by ``format``."""
    if bits == AUTO:
        return
    if not is_int(bits) or not any(bits in codec.bits for codec in _REGISTRY.values() if codec.implicit):
        raise ConfigError(f"quant.bits must be {bits_help()} or 'auto', got {bits!r}")


def bits_help() -> str:
    """``"32 (fp32), 16 (bf16), 8 (int8), 2..7 (simulated)"``: widest first."""
    entries = sorted(
        ((max(codec.bits), codec.bits_help) for codec in _REGISTRY.values() if codec.implicit and codec.bits_help),
        key=lambda entry: -entry[0],
    )
    return ", ".join(dict.fromkeys(text for _, text in entries))


def mode_for(bits: object, preferred: str) -> str:
    """``preferred`` if a codec serving ``bits`` runs it, else the first mode one does
    (``quant.bits=4`` -> ``dynamic``); ``preferred`` when no codec serves ``bits``."""
    serving = [codec for codec in _REGISTRY.values() if codec.implicit and bits in codec.bits]
    if not serving or any(not codec.modes or preferred in codec.modes for codec in serving):
        return preferred
    return serving[0].modes[0]


def modes() -> tuple[str, ...]:
    """Every ``quant.mode`` some codec serves, in registration order."""
    return tuple(dict.fromkeys(mode for codec in _REGISTRY.values() for mode in codec.modes))


def _overlap(a: Codec, b: Codec) -> bool:
    return bool(set(a.bits) & set(b.bits)) and (not a.modes or not b.modes or bool(set(a.modes) & set(b.modes)))
