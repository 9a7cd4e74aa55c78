"""How faithful the actors' quantized copy is to the learner's fp32 policy.

:func:`policy_divergence` measures it in the policy's own terms, on observations the copy was
not calibrated on (the push passes held-out recent observations): the exact
``KL(mu || pi)`` for a stochastic policy, the greedy-action agreement for a Q-network, the
action error as a fraction of the action range for a deterministic actor. The metric names in
:func:`fidelity_metrics` are the documented ``quant/*`` names.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import GaussianPolicy
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> policy = GaussianPolicy(spec, hidden=(64, 64), log_std_init=-1.0)
    >>> copy = QuantizedNetwork.from_network(policy, QuantSpec(bits=8, mode="dynamic"))
    >>> divergence = policy_divergence(policy, copy, torch.randn(128, 3), spec)
    >>> sorted(divergence), divergence["quant/kl"] < 1e-3
    (['quant/kl', 'quant/kl_max'], True)
"""

from __future__ import annotations

import torch
from torch import nn

from actorq.quant.layout import TrunkLayout, input_normalizer
from actorq.quant.module_layout import ModuleLayout, layout_of
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
def weight_error(network: nn.Module, payload: Payload, spec: QuantSpec,
                 layout: TrunkLayout | ModuleLayout | None = None) -> float:
    """Relative L2 error of all trunk weights: ``||W - W_q|| / ||W||`` over every layer, with
    ``W_q`` the weights ``spec``'s codec reads from the payload. ``layout``: the trunk's (the
    actors' copy's, whose converted int8 template is built once), else made from the trunk."""
    layout = layout if layout is not None else layout_of(network.trunk)
    originals = layout.weights(network.trunk)
    quantized = spec.codec.dequantized_weights(layout, spec, payload)
    error = sum(((w - q) ** 2).sum() for w, q in zip(originals, quantized, strict=True))
    norm = sum((w**2).sum() for w in originals)
    return float(torch.sqrt(error / norm))


def has_kl(network: nn.Module) -> bool:
    """Whether ``network`` is a stochastic policy whose divergence is a KL (its head gives
    the action distribution): what :func:`policy_divergence` measures and ``quant.max_kl``
    bounds."""
    return hasattr(network.head, "distribution")


@torch.no_grad()
def policy_divergence(reference: nn.Module, candidate: nn.Module, observations: torch.Tensor,
                      spec, batch_size: int | None = None) -> dict[str, float]:
    """How far the actors' copy ``mu`` acts from the learner's policy ``pi`` on ``observations``.

    In the policy's own terms, under the documented names:

    * a stochastic policy (a head with ``distribution``: PPO's Gaussian or categorical, SAC's
      squashed Gaussian, compared before the squashing, which leaves KL unchanged):
      ``quant/kl``, the mean over observations of the exact ``KL(mu || pi)``, and
      ``quant/kl_max``, its largest value;
    * a Q-network: ``quant/greedy_agreement``, the share of observations on which both pick
      the same greedy action;
    * a deterministic actor: ``quant/action_error``, the mean ``|a_pi - a_mu|`` as a fraction of
      the action range, and ``quant/action_error_max``.

    Args:
        reference: the learner's fp32 policy (``trunk``, ``head``, an optional ``normalizer``).
        candidate: its copy at the actors' precision (a
            :class:`~actorq.quant.network.QuantizedNetwork`).
        observations: ``[N, obs_dim]``, as the env gives them.
        spec: the env spec (``discrete``, ``action_low``, ``action_high``).
        batch_size: the batch the actors run ``candidate`` at (their envs per worker): it runs
            in chunks of that size, since a dynamic int8 copy quantizes over its batch's
            range; ``None``: all at once.
    """
    if batch_size is not None:
        candidate = _Batched(candidate, batch_size)
    if has_kl(reference):
        pi = reference.head.distribution(_features(reference, observations))
        mu = candidate.head.distribution(_features(candidate, observations))
        kl = torch.distributions.kl_divergence(mu, pi)
        if kl.dim() > 1:  # a diagonal Gaussian: independent dimensions
            kl = kl.sum(-1)
        return {"quant/kl": kl.mean().item(), "quant/kl_max": kl.max().item()}
    if spec.discrete:
        return {"quant/greedy_agreement": action_agreement(reference, candidate, observations)}
    action_range = torch.tensor(spec.action_high) - torch.tensor(spec.action_low)
    error = ((reference(observations).float() - candidate(observations).float()).abs() / action_range).mean(-1)
    return {"quant/action_error": error.mean().item(), "quant/action_error_max": error.max().item()}


class _Batched(nn.Module):
    """``network`` run on ``batch_size`` observations at a time."""

    def __init__(self, network: nn.Module, batch_size: int):
        super().__init__()
        self.network, self.batch_size, self.head = network, batch_size, network.head

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.network(part) for part in observations.split(self.batch_size)])

    def features(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.cat([_features(self.network, part) for part in observations.split(self.batch_size)])


def _features(network: nn.Module, observations: torch.Tensor) -> torch.Tensor:
    """``trunk(normalizer(observations))``: what a policy's head reads."""
    if hasattr(network, "features"):
        return network.features(observations)
    normalizer = input_normalizer(network)
    return network.trunk(normalizer(observations) if normalizer is not None else observations)


def fp32_nbytes(network: nn.Module) -> int:
    """Bytes of the same trunk as an fp32 payload (the ``bits=32`` push)."""
    fp32 = QuantSpec(bits=32)
    return fp32.codec.payload_nbytes(layout_of(network.trunk), fp32)


def fidelity_metrics(
    network: nn.Module, quantized: QuantizedNetwork, observations: torch.Tensor, spec, batch_size: int | None = None,
    divergence: dict[str, float] | None = None,
) -> dict[str, float]:
    """Everything a push logs about its payload, under the ``quant/`` metric names.

    Args:
        network: the learner's fp32 policy.
        quantized: the actors' copy of it.
        observations: held-out observations, not the ones the copy was calibrated on.
        spec: the env spec.
        batch_size: the batch the actors run ``quantized`` at (see :func:`policy_divergence`).
        divergence: :func:`policy_divergence`'s terms to log, where they were measured
            already on these observations: the divergence budget's, of the copy at the actors'
            own precision, which ``quantized`` is unless the push fell back; else those of
            ``quantized``, measured here.

    Returns:
        :func:`policy_divergence`'s terms, ``quant/weight_error``, ``quant/payload_bytes``,
        ``quant/fp32_bytes`` and ``quant/compression`` (payload bytes / fp32 bytes).
    """
    payload = quantized.payload()
    nbytes, fp32 = payload_nbytes(payload), fp32_nbytes(network)
    return {
        **(divergence or policy_divergence(network, quantized, observations, spec, batch_size)),
        "quant/weight_error": weight_error(network, payload, quantized.active_quant, quantized.layout),
        "quant/payload_bytes": float(nbytes),
        "quant/fp32_bytes": float(fp32),
        "quant/compression": nbytes / fp32,
    }
