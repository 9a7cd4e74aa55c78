"""Learner side: the fp32 policy network -> a payload of plain tensors for the actors.

A payload is a flat ``dict[str, torch.Tensor]`` of ordinary dtypes only (``int8`` codes,
``float32`` scales and biases, ``int32`` zero points, ``uint8`` packed codes, or
``bfloat16``/``float32`` weights), named as the spec's codec says
(:meth:`actorq.quant.Codec.payload_spec`). Plain tensors are what TorchRL's shared-memory
weight sync can copy; torch.ao's packed int8 parameters are invisible to it.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import DeterministicActor
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> actor = DeterministicActor(spec, hidden=(64, 64))
    >>> payload = quantize(actor, QuantSpec(bits=8, mode="static"), calibration=torch.randn(256, 3))
    >>> payload["l1_weight"].dtype, payload["l1_weight_scale"].shape, payload["input_scale"].dtype
    (torch.int8, torch.Size([64]), torch.float32)
    >>> payload["l0_weight"].dtype, payload["l2_weight"].dtype  # the default keeps the ends fp32
    (torch.float32, torch.float32)
"""

from __future__ import annotations

import torch
from torch import nn

from actorq.util.errors import ConfigError
from actorq.quant.layout import Payload, input_normalizer
from actorq.quant.module_layout import layout_of
from actorq.quant.spec import QuantSpec

__all__ = ["Payload", "payload_nbytes", "quantize", "reference_module"]


def quantize(network: nn.Module, spec: QuantSpec, calibration: torch.Tensor | None = None) -> Payload:
    """Post-training quantization of ``network.trunk`` into a payload (``spec``'s codec encodes it).

    Args:
        network: an fp32 policy with a ``trunk`` (an ``nn.Sequential`` of ``Linear ->
            [LayerNorm] -> [activation]``, see :class:`~actorq.quant.layout.TrunkLayout`, or a
            convolutional trunk, see :class:`~actorq.quant.module_layout.ModuleLayout`) and a
            ``head`` (kept fp32 and not part of the payload).
        spec: the precision; ``bits="auto"`` must be resolved first.
        calibration: recent observations ``[N, obs_dim]``, as the env gives them (a policy
            with an observation normalizer normalizes them first); required when
            ``spec.needs_calibration`` (static mode, learned observer), ignored otherwise.

    Returns:
        The payload: a flat dict of plain tensors, detached copies of the learner's values.
    """
    layout = layout_of(network.trunk)
    codec = spec.codec
    codec.fits(layout, spec)
    if spec.needs_calibration and (calibration is None or len(calibration) == 0):
        raise ValueError(
            "static quantization with a learned observer needs calibration observations; "
            "pass recent observations, or use quant.observer=fixed or quant.mode=dynamic"
        )
    with torch.no_grad():
        return codec.encode(network.trunk, layout, spec, trunk_inputs(network, calibration))


def reference_module(
    network: nn.Module, spec: QuantSpec, calibration: torch.Tensor | None = None
) -> nn.Module:
    """The torch.ao module that :func:`quantize` extracts an int8 payload from, with the head.

    Useful to check that actors compute exactly what the learner quantized.
    """
    layout = layout_of(network.trunk)
    spec.codec.fits(layout, spec)
    with torch.no_grad():
        converted = spec.codec.reference(network.trunk, spec, trunk_inputs(network, calibration))
    if converted is None:
        raise ConfigError(f"{spec.describe()} has no torch.ao reference module; the int8 codecs have one")
    normalizer = input_normalizer(network)
    modules = [normalizer] if normalizer is not None else []
    return nn.Sequential(*modules, converted, network.head).eval()


def trunk_inputs(network: nn.Module, observations: torch.Tensor | None) -> torch.Tensor | None:
    """``observations`` as ``network``'s trunk sees them: through its observation normalizer."""
    normalizer = input_normalizer(network)
    if observations is None or normalizer is None:
        return observations
    with torch.no_grad():
        return normalizer(observations)


def payload_nbytes(payload: Payload) -> int:
    """Bytes a payload occupies (what a push copies into every actor)."""
    return sum(t.numel() * t.element_size() for t in payload.values())
