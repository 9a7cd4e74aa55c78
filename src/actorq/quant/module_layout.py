"""A trunk of any architecture torch.ao's FX graph mode can trace, such as a convolutional
one: carried as a module whose structure the actors rebuild, with its weights in the payload.

An MLP trunk has a :class:`~actorq.quant.layout.TrunkLayout`: widths, norms and activations
say everything. A convolutional trunk (:mod:`actorq.algos.conv`) has no such short
description, so its layout holds an fp32 copy of the trunk itself (:attr:`ModuleLayout.architecture`,
whose weights are never read) and the shape and dtype of its input. Its payload is the
state of the module the actors run, as plain tensors: the fp32 parameters, or the
converted int8 module's codes, scales and zero points (:func:`plain_state`), which
:func:`restored_state` turns back into the state a fresh module of the same structure loads.

Example:
    >>> from torch import nn
    >>> trunk = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    >>> layout = ModuleLayout.from_trunk(trunk, input_shape=(2, 8, 8))
    >>> layout.event_dims, [tuple(w.shape) for w in layout.weights(trunk)]
    (3, [(4, 2, 3, 3), (3, 144)])
    >>> sorted(plain_state(trunk.state_dict()))
    ['0__bias', '0__weight', '3__bias', '3__weight']
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Mapping

import torch
from torch import nn

from actorq.quant import _ao
from actorq.quant.conv import fp32_parts
from actorq.quant.layout import Payload, PayloadSpec, TrunkLayout
from actorq.util.errors import ConfigError
from actorq.util.memory_format import channels_last_faster, has_layout_choice, set_channels_last

ACTOR_BATCH = 8
"""The batch at which an fp32 copy's layout is timed: an actor worker's 8 Atari envs."""
WEIGHTED = (nn.Conv2d, nn.Linear)
"""The modules whose weights a trunk's weight error compares."""


@dataclasses.dataclass(frozen=True, eq=False)
class ModuleLayout:
    """The structure of a trunk that is not a plain MLP.

    Attributes:
        architecture: an fp32 copy of the trunk; the actors rebuild its structure, never
            read its weights.
        input_shape: one observation's shape, e.g. ``(4, 84, 84)``.
        input_dtype: the observations' dtype (uint8 frames).
    """

    architecture: nn.Module
    input_shape: tuple[int, ...]
    input_dtype: torch.dtype = torch.uint8
    _templates: dict = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_trunk(cls, trunk: nn.Module, input_shape: tuple[int, ...] | None = None) -> ModuleLayout:
        """The layout of ``trunk``; its input shape is ``input_shape``, or the ``frame_shape``
        of the first submodule that has one (the trunks of :mod:`actorq.algos.conv`)."""
        if input_shape is None:
            input_shape = next((tuple(m.frame_shape) for m in trunk.modules() if hasattr(m, "frame_shape")), None)
        if input_shape is None:
            raise ConfigError(f"a {type(trunk).__name__} trunk needs its input shape: give one of its "
                              "modules a frame_shape attribute (channels, height, width)")
        # The default layout: int8 templates trace it, and fp32 copies measure their own.
        architecture = set_channels_last(copy.deepcopy(trunk).float().eval().requires_grad_(False), False)
        dtype = torch.uint8 if len(input_shape) == 3 else torch.float32
        return cls(architecture, tuple(int(size) for size in input_shape), dtype)

    @property
    def event_dims(self) -> int:
        """How many trailing dimensions one observation has (3 for frames)."""
        return len(self.input_shape)

    def fresh(self) -> nn.Module:
        """A new fp32 module of this structure (its weights are the architecture's)."""
        return copy.deepcopy(self.architecture)

    def example_inputs(self, count: int = 1) -> torch.Tensor:
        """``count`` zero observations, of the input's shape and dtype."""
        return torch.zeros((count, *self.input_shape), dtype=self.input_dtype)

    def weights(self, trunk: nn.Module) -> list[torch.Tensor]:
        """Every convolution's and linear layer's fp32 weight in ``trunk``, in module order."""
        return [module.weight.detach().float() for module in trunk.modules() if isinstance(module, WEIGHTED)]

    def fp32_channels_last(self) -> bool:
        """Whether this process's fp32 copies run channels-last: measured on the first call in
        each process (an actor's core, one thread, a batch of :data:`ACTOR_BATCH` frames;
        :func:`actorq.util.memory_format.channels_last_faster`), the same answer after."""
        if "channels_last" not in self._templates:
            faster = has_layout_choice(self.architecture) and channels_last_faster(
                self.fresh(), self.example_inputs(ACTOR_BATCH))[0]
            self._templates["channels_last"] = faster
        return self._templates["channels_last"]

    def int8_template(self, engine: str, fp32_ends: bool = False) -> nn.Module:
        """The int8 module torch.ao converts this structure into for ``engine``, with its
        :func:`~actorq.quant.conv.fp32_parts` in fp32 if ``fp32_ends`` (built once; its
        weights and ranges are placeholders for a payload's)."""
        key = (engine, fp32_ends)
        if key not in self._templates:
            fresh = self.fresh()
            self._templates[key] = _ao.convert_static_fx(fresh, [self.example_inputs()], engine, True,
                                                         **fp32_parts(fresh, fp32_ends))
        return self._templates[key]

    def __getstate__(self) -> dict:
        # Converted modules are rebuilt, and the layout measured, where they are needed, not
        # pickled to the workers.
        state = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        state["_templates"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)


def layout_of(trunk: nn.Module) -> TrunkLayout | ModuleLayout:
    """A :class:`ModuleLayout` for a trunk with a convolution, else the MLP trunk's
    :class:`~actorq.quant.layout.TrunkLayout` (which explains a module that does not fit)."""
    if any(isinstance(module, nn.Conv2d) for module in trunk.modules()):
        return ModuleLayout.from_trunk(trunk)
    return TrunkLayout.from_trunk(trunk)


def event_dims(layout: TrunkLayout | ModuleLayout) -> int:
    """How many trailing dimensions one observation of ``layout``'s trunk has (1: a vector)."""
    return layout.event_dims if isinstance(layout, ModuleLayout) else 1


def payload_name(key: str) -> str:
    """A state-dict key as a payload tensor's name (buffer names cannot hold dots)."""
    return key.replace(".", "__")


def plain_state(state: Mapping[str, object]) -> Payload:
    """A module's ``state_dict()`` as plain tensors: quantized tensors split into codes,
    scales and zero points, a packed layer's ``(weight, bias)`` into one entry each; what is
    not a tensor (a packed layer's dtype) belongs to the structure and is left out."""
    payload: Payload = {}
    for key, value in state.items():
        for name, tensor in _tensors(payload_name(key), value):
            payload.update(_ao.plain_tensors(name, tensor))
    return payload


def restored_state(template: Mapping[str, object], payload: Payload) -> dict[str, object]:
    """The ``state_dict()`` :func:`plain_state` made ``payload`` from, read against the state
    of a module of the same structure (``template``), with its per-module versions (quantized
    modules read their state by the version that wrote it)."""
    state: dict[str, object] = collections.OrderedDict()
    state._metadata = getattr(template, "_metadata", None)  # type: ignore[attr-defined]
    for key, value in template.items():
        name = payload_name(key)
        if isinstance(value, torch.Tensor):
            state[key] = _ao.restored_tensor(name, value, payload)
        elif isinstance(value, tuple):
            state[key] = tuple(None if part is None else _ao.restored_tensor(f"{name}__{i}", part, payload)
                               for i, part in enumerate(value))
        else:
            state[key] = value
    return state


def quantized_weights(template: Mapping[str, object], payload: Payload) -> list[torch.Tensor]:
    """The fp32 weights of every convolution and linear layer of ``payload`` (a converted int8
    module's, ``template`` its structure's state), in module order: the quantized ones
    dequantized, those left fp32 (a first stage kept in fp32) as they are."""
    weights = []
    for key, value in restored_state(template, payload).items():
        first = value[0] if isinstance(value, tuple) else value
        if not isinstance(first, torch.Tensor) or first.dim() < 2:
            continue
        if first.is_quantized:
            weights.append(first.dequantize())
        elif key.endswith(".weight"):
            weights.append(first)
    return weights


def state_payload_spec(state: Mapping[str, object]) -> PayloadSpec:
    """The names, shapes and dtypes :func:`plain_state` gives for a module with ``state``."""
    return {name: (tuple(tensor.shape), tensor.dtype) for name, tensor in plain_state(state).items()}


def _tensors(name: str, value: object) -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if isinstance(value, tuple):
        return [(f"{name}__{i}", part) for i, part in enumerate(value) if isinstance(part, torch.Tensor)]
    return []
