"""The shape of a policy trunk: an ``nn.Sequential`` of ``Linear -> [LayerNorm] -> [activation]``.

Layer ``k`` of a trunk is its ``k``-th ``Linear`` together with the ``LayerNorm`` and the
activation that directly follow it (each optional, in that order). The payload names a layer's
tensors ``l{k}_...``; which tensors, and at which dtype, is the codec's business
(:mod:`actorq.quant.codecs`). The learner side (:func:`actorq.quant.quantize`) and the worker
side (:class:`actorq.quant.QuantizedNetwork`) both read the layout from here, so they cannot
disagree.

Example:
    >>> from torch import nn
    >>> trunk = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 1))
    >>> layout = TrunkLayout.from_trunk(trunk)
    >>> layout.sizes, [layer.activation for layer in layout.layers], [layer.norm for layer in layout.layers]
    ((3, 8, 8, 1), ['tanh', None, None], [False, True, False])
    >>> mlp_trunk = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 1))
    >>> TrunkLayout(sizes=(3, 64, 1)) == TrunkLayout.from_trunk(mlp_trunk)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from actorq.util.errors import ConfigError

# A payload: plain tensors named l{k}_..., and what a codec says it holds: name -> (shape, dtype).
Payload = dict[str, torch.Tensor]
PayloadSpec = dict[str, tuple[tuple[int, ...], torch.dtype]]

# Activations a trunk may use (parameter-free, so the name says everything a worker must build).
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "silu": nn.SiLU,
}
_ACTIVATION_NAMES = {cls: name for name, cls in ACTIVATIONS.items()}
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default


@dataclass(frozen=True)
class LayerLayout:
    """One ``Linear``, optionally followed by a ``LayerNorm`` and then an activation.

    Attributes:
        in_features, out_features: the ``Linear``'s widths.
        norm: whether a ``LayerNorm(out_features)`` follows the ``Linear``.
        activation: a key of :data:`ACTIVATIONS` (``"relu"``, ``"tanh"``...) or ``None``.
        norm_eps: the ``LayerNorm``'s ``eps``.
    """

    in_features: int
    out_features: int
    norm: bool = False
    activation: str | None = None
    norm_eps: float = LAYER_NORM_EPS

    def __post_init__(self) -> None:
        object.__setattr__(self, "in_features", int(self.in_features))
        object.__setattr__(self, "out_features", int(self.out_features))
        if self.in_features <= 0 or self.out_features <= 0:
            raise ConfigError(f"a trunk layer needs widths > 0, got {self.in_features} -> {self.out_features}")
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"trunk activation must be one of {', '.join(ACTIVATIONS)} or None; got {self.activation!r}"
            )

    def modules(self) -> list[nn.Module]:
        """Fresh fp32 modules for this layer (random weights)."""
        out: list[nn.Module] = [nn.Linear(self.in_features, self.out_features)]
        if self.norm:
            out.append(nn.LayerNorm(self.out_features, eps=self.norm_eps))
        if self.activation is not None:
            out.append(ACTIVATIONS[self.activation]())
        return out


@dataclass(frozen=True, init=False)
class TrunkLayout:
    """The layers of a trunk, input first.

    Build it from a trunk with :meth:`from_trunk`, from explicit ``layers=``, or (the shape
    :func:`actorq.algos.networks.mlp` makes) from ``sizes`` and ``layer_norm``: ``Linear ->
    [LayerNorm] -> ReLU`` per hidden width, then a last ``Linear``.

    Attributes:
        layers: one :class:`LayerLayout` per ``Linear``.
    """

    layers: tuple[LayerLayout, ...]

    def __init__(
        self,
        sizes: Sequence[int] | None = None,
        layer_norm: bool = False,
        *,
        layers: Sequence[LayerLayout] | None = None,
    ):
        if (sizes is None) == (layers is None):
            raise ConfigError("a TrunkLayout needs either sizes (an mlp's widths) or layers, not both")
        if layers is None:
            sizes = tuple(sizes)  # type: ignore[arg-type]
            if len(sizes) < 2 or any(int(s) <= 0 for s in sizes):
                raise ConfigError(f"a trunk needs at least input and output widths > 0, got {sizes}")
            last = len(sizes) - 2
            layers = [
                LayerLayout(
                    sizes[k], sizes[k + 1], norm=layer_norm and k < last, activation="relu" if k < last else None
                )
                for k in range(last + 1)
            ]
        layers = tuple(layers)
        if not layers:
            raise ConfigError("the policy trunk has no nn.Linear layer to quantize")
        for k in range(len(layers) - 1):
            if layers[k].out_features != layers[k + 1].in_features:
                raise ConfigError(
                    f"trunk layer {k} outputs {layers[k].out_features} features but layer {k + 1} "
                    f"takes {layers[k + 1].in_features}"
                )
        object.__setattr__(self, "layers", layers)

    def weights(self, trunk: nn.Sequential) -> list[torch.Tensor]:
        """Every layer's fp32 weight matrix in ``trunk`` (a trunk of this layout)."""
        return [self.linear(trunk, k).weight.detach().float() for k in range(self.num_layers)]

    @classmethod
    def from_trunk(cls, trunk: nn.Module) -> TrunkLayout:
        """Reads the layout of a trunk, or explains which module does not fit."""
        if not isinstance(trunk, nn.Sequential):
            raise ConfigError(f"the policy trunk must be an nn.Sequential, got {type(trunk).__name__}")
        modules = list(trunk)
        if not any(isinstance(m, nn.Linear) for m in modules):
            raise ConfigError("the policy trunk has no nn.Linear layer to quantize")
        layers: list[LayerLayout] = []
        i = 0
        while i < len(modules):
            linear = modules[i]
            if type(linear) is not nn.Linear:
                raise ConfigError(
                    "quantization supports an nn.Sequential of Linear -> [LayerNorm] -> [activation] "
                    f"blocks (activations: {', '.join(ACTIVATIONS)}); trunk[{i}] is "
                    f"{type(linear).__name__} where a Linear is expected"
                )
            i += 1
            norm, eps = False, LAYER_NORM_EPS
            if i < len(modules) and isinstance(modules[i], nn.LayerNorm):
                _check_norm(modules[i], linear.out_features, i)
                norm, eps = True, float(modules[i].eps)
                i += 1
            activation = None
            if i < len(modules) and type(modules[i]) in _ACTIVATION_NAMES:
                activation = _ACTIVATION_NAMES[type(modules[i])]
                i += 1
            layers.append(LayerLayout(linear.in_features, linear.out_features, norm, activation, eps))
        return cls(layers=layers)

    @property
    def sizes(self) -> tuple[int, ...]:
        """``(in_dim, *hidden, out_dim)``."""
        return (self.layers[0].in_features, *(layer.out_features for layer in self.layers))

    @property
    def layer_norm(self) -> bool:
        """Whether any layer has a ``LayerNorm``."""
        return any(layer.norm for layer in self.layers)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def has_relu(self, k: int) -> bool:
        return self.layers[k].activation == "relu"

    def module_index(self, k: int) -> int:
        """Index in the ``nn.Sequential`` trunk of the ``k``-th ``Linear``."""
        return sum(1 + layer.norm + (layer.activation is not None) for layer in self.layers[:k])

    def linear(self, trunk: nn.Sequential, k: int) -> nn.Linear:
        """The ``k``-th ``Linear`` of an fp32 trunk with this layout."""
        return trunk[self.module_index(k)]

    def norm(self, trunk: nn.Sequential, k: int) -> nn.LayerNorm:
        """The ``LayerNorm`` after the ``k``-th ``Linear`` of an fp32 trunk with this layout."""
        return trunk[self.module_index(k) + 1]

    def build_float_trunk(self) -> nn.Sequential:
        """An fp32 trunk of this shape (random weights)."""
        return nn.Sequential(*(m for layer in self.layers for m in layer.modules()))


def _check_norm(norm: nn.LayerNorm, features: int, index: int) -> None:
    if tuple(norm.normalized_shape) != (features,) or not norm.elementwise_affine or norm.bias is None:
        raise ConfigError(
            f"trunk[{index}] is a LayerNorm that quantization does not support: it must normalize the "
            f"last {features} features with a weight and a bias, got {norm}"
        )


def input_normalizer(network: nn.Module) -> nn.Module | None:
    """The observation normalizer a policy applies before its trunk (``network.normalizer``,
    e.g. PPO's running mean and variance), or ``None`` when it has none (or an identity)."""
    normalizer = getattr(network, "normalizer", None)
    return None if normalizer is None or isinstance(normalizer, nn.Identity) else normalizer
