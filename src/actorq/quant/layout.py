"""The shape of a policy trunk and of the payload that carries it at a given precision.

A trunk is what :func:`actorq.networks.mlp` builds: ``Linear -> [LayerNorm] -> ReLU`` per
hidden width, then a last ``Linear``. Layer ``k`` of the payload is the ``k``-th ``Linear``
(with its ``LayerNorm``). The learner side (:func:`actorq.quant.quantize`) and the worker side
(:class:`actorq.quant.QuantizedNetwork`) both read payload names and shapes from here, so they
cannot disagree.

Example:
    >>> layout = TrunkLayout(sizes=(3, 64, 1))
    >>> sorted(layout.payload_spec(QuantSpec(bits=32)))
    ['l0_bias', 'l0_weight', 'l1_bias', 'l1_weight']
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from actorq.errors import ConfigError
from actorq.quant.spec import QuantSpec

# name -> (shape, dtype)
PayloadSpec = dict[str, tuple[tuple[int, ...], torch.dtype]]


@dataclass(frozen=True)
class TrunkLayout:
    """Layer widths of an MLP trunk, input first, output last.

    Attributes:
        sizes: ``(in_dim, *hidden, out_dim)``.
        layer_norm: whether every hidden ``Linear`` is followed by a ``LayerNorm``.
    """

    sizes: tuple[int, ...]
    layer_norm: bool = False

    def __post_init__(self) -> None:
        if len(self.sizes) < 2 or any(int(s) <= 0 for s in self.sizes):
            raise ConfigError(f"a trunk needs at least input and output widths > 0, got {self.sizes}")
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))

    @classmethod
    def from_trunk(cls, trunk: nn.Sequential) -> TrunkLayout:
        """Reads the layout of a trunk, or explains why it is not a quantizable MLP."""
        linears = [m for m in trunk if isinstance(m, nn.Linear)]
        if not linears:
            raise ConfigError("the policy trunk has no nn.Linear layer to quantize")
        sizes = (linears[0].in_features, *(m.out_features for m in linears))
        layer_norm = any(isinstance(m, nn.LayerNorm) for m in trunk)
        layout = cls(sizes, layer_norm)
        expected = [type(m) for m in layout.build_float_trunk()]
        if [type(m) for m in trunk] != expected:
            names = ", ".join(type(m).__name__ for m in trunk)
            raise ConfigError(
                f"quantization supports trunks of Linear -> [LayerNorm] -> ReLU blocks and a last "
                f"Linear (actorq.networks.mlp); got {names}"
            )
        return layout

    @property
    def num_layers(self) -> int:
        return len(self.sizes) - 1

    def has_relu(self, k: int) -> bool:
        return k < self.num_layers - 1

    def has_norm(self, k: int) -> bool:
        return self.layer_norm and self.has_relu(k)

    def build_float_trunk(self) -> nn.Sequential:
        """An fp32 trunk of this shape (random weights), as :func:`actorq.networks.mlp` makes."""
        from actorq.networks import mlp

        return mlp(self.sizes[0], self.sizes[1:-1], self.sizes[-1], layer_norm=self.layer_norm)

    def module_index(self, k: int) -> int:
        """Index in the ``nn.Sequential`` trunk of the ``k``-th ``Linear``."""
        return k * (3 if self.layer_norm else 2)

    def payload_spec(self, spec: QuantSpec) -> PayloadSpec:
        """Names, shapes and dtypes of every tensor in a payload for ``spec``."""
        if spec.is_auto:
            raise ConfigError("quant.bits=auto must be resolved with actorq.quant.select_precision first")
        out: PayloadSpec = {}
        if spec.is_static:
            out["input_scale"] = ((1,), torch.float32)
            out["input_zero_point"] = ((1,), torch.int32)
        for k in range(self.num_layers):
            out.update(self._layer_spec(k, spec))
        return out

    def payload_nbytes(self, spec: QuantSpec) -> int:
        """Bytes of a payload for ``spec`` (what every broadcast copies to every actor)."""
        return sum(math.prod(shape) * dtype.itemsize for shape, dtype in self.payload_spec(spec).values())

    def _layer_spec(self, k: int, spec: QuantSpec) -> PayloadSpec:
        fan_in, fan_out = self.sizes[k], self.sizes[k + 1]
        float_dtype = torch.bfloat16 if spec.bits == 16 else torch.float32
        out: PayloadSpec = {}
        if spec.bits in (32, 16):
            out[f"l{k}_weight"] = ((fan_out, fan_in), float_dtype)
        else:
            channels = fan_out if spec.granularity == "per_channel" else 1
            out[f"l{k}_weight"] = ((fan_out, fan_in), torch.int8)
            out[f"l{k}_weight_scale"] = ((channels,), torch.float32)
            out[f"l{k}_weight_zero_point"] = ((channels,), torch.int32)
        out[f"l{k}_bias"] = ((fan_out,), float_dtype)
        if spec.is_static:
            out[f"l{k}_scale"] = ((1,), torch.float32)
            out[f"l{k}_zero_point"] = ((1,), torch.int32)
        if self.has_norm(k):
            out[f"l{k}_norm_weight"] = ((fan_out,), float_dtype)
            out[f"l{k}_norm_bias"] = ((fan_out,), float_dtype)
            if spec.is_static:
                out[f"l{k}_norm_scale"] = ((1,), torch.float32)
                out[f"l{k}_norm_zero_point"] = ((1,), torch.int32)
        return out
