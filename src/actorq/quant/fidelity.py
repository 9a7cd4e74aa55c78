"""How faithful the actors' quantized copy is to the learner's fp32 policy.

The metric names in :func:`fidelity_metrics` are the documented ``quant/*`` names.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import DeterministicActor
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> actor = DeterministicActor(spec, hidden=(64, 64))
    >>> copy = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode="dynamic"))
    >>> action_error(actor, copy, torch.randn(128, 3)) < 0.05
    True
"""

from __future__ import annotations

import torch
from torch import nn

from actorq.quant.layout import TrunkLayout
from actorq.quant.network import QuantizedNetwork
from actorq.quant.quantize import Payload, payload_nbytes
from actorq.quant.spec import QuantSpec


@torch.no_grad()
def action_error(
    reference: nn.Module, candidate: nn.Module, observations: torch.Tensor, discrete: bool = False
) -> float:
    """Mean absolute action difference (continuous) or disagreement rate (discrete).

    Args:
        reference: the fp32 policy network.
        candidate: its quantized copy.
        observations: a batch ``[N, obs_dim]``.
        discrete: whether the networks output Q-values (compared by their argmax).

    Returns:
        ``mean |a_ref - a_q|`` in action units, or ``1 - agreement`` for discrete actions.
    """
    if discrete:
        return 1.0 - action_agreement(reference, candidate, observations)
    return (reference(observations).float() - candidate(observations).float()).abs().mean().item()


@torch.no_grad()
def action_agreement(reference: nn.Module, candidate: nn.Module, observations: torch.Tensor) -> float:
    """Fraction of observations on which both Q-networks pick the same greedy action."""
    same = reference(observations).argmax(dim=-1) == candidate(observations).argmax(dim=-1)
    return same.float().mean().item()


@torch.no_grad()
def weight_error(network: nn.Module, payload: Payload, spec: QuantSpec) -> float:
    """Relative L2 error of all trunk weights: ``||W - W_q|| / ||W||`` over every layer, with
    ``W_q`` the weights ``spec``'s codec reads from the payload."""
    layout = TrunkLayout.from_trunk(network.trunk)
    originals = [layout.linear(network.trunk, k).weight.float() for k in range(layout.num_layers)]
    quantized = spec.codec.dequantized_weights(layout, spec, payload)
    error = sum(((w - q) ** 2).sum() for w, q in zip(originals, quantized, strict=True))
    norm = sum((w**2).sum() for w in originals)
    return float(torch.sqrt(error / norm))


def fp32_nbytes(network: nn.Module) -> int:
    """Bytes of the same trunk as an fp32 payload (the ``bits=32`` broadcast)."""
    fp32 = QuantSpec(bits=32)
    return fp32.codec.payload_nbytes(TrunkLayout.from_trunk(network.trunk), fp32)


def fidelity_metrics(
    network: nn.Module, quantized: QuantizedNetwork, observations: torch.Tensor, discrete: bool = False
) -> dict[str, float]:
    """Everything a broadcast logs about its payload, under the ``quant/`` metric names.

    Returns:
        ``quant/action_error``, ``quant/weight_error``, ``quant/payload_bytes``,
        ``quant/fp32_bytes`` and ``quant/compression`` (payload bytes / fp32 bytes); plus
        ``quant/action_agreement`` for discrete actions.
    """
    payload = quantized.payload()
    nbytes, fp32 = payload_nbytes(payload), fp32_nbytes(network)
    metrics = {
        "quant/action_error": action_error(network, quantized, observations, discrete),
        "quant/weight_error": weight_error(network, payload, quantized.quant),
        "quant/payload_bytes": float(nbytes),
        "quant/fp32_bytes": float(fp32),
        "quant/compression": nbytes / fp32,
    }
    if discrete:
        metrics["quant/action_agreement"] = 1.0 - metrics["quant/action_error"]
    return metrics
