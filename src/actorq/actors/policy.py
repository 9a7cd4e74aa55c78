"""The policy an actor runs: a behaviour network plus exploration, and what it records.

The exploration scale lives in a buffer, so pushing the learner's weights to the actors
also pushes the current epsilon (or Gaussian sigma): annealing is decided by the learner.
So does the policy's version (bumped by every push), which the actors record with each
step when the learner asked for it (``records``), beside the action's log-probability
under this very policy (the int8 one, for int8 actors) or the network's own output before
exploration, and the actor worker that took it.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import QNetwork
    >>> spec = EnvSpec(obs_dim=4, discrete=True, num_actions=2)
    >>> policy = ExplorationPolicy(QNetwork(spec, (32,)), spec, noise_scale=0.1)
    >>> policy(torch.zeros(4)).shape  # unbatched observations work too
    torch.Size([])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import nn

from actorq.actors.processes import recorded_worker
from actorq.envs import EnvSpec
from actorq.quant import QuantizedNetwork, QuantSpec, has_kl


RECORDS = ("log_prob", "policy_version", "worker", "output")
"""What a learner may ask the actors to record with each step, besides the action: the
action's log-probability under the actors' own policy, the version of that policy, the
actor worker that acted (its row ``i`` is that worker's env ``i``), and the network's output
before exploration (a deterministic actor's action, a Q-network's values)."""


class ExplorationPolicy(nn.Module):
    """Epsilon-greedy over Q-values (discrete), clipped Gaussian noise (continuous), or the
    network's own sampling (a stochastic policy such as SAC's).

    Args:
        network: maps observations ``[B, obs_dim]`` to Q-values or deterministic actions.
        spec: the environment spec (action space kind and bounds).
        noise_scale: epsilon (discrete) or sigma as a fraction of the half action range;
            unused when ``stochastic``.
        stochastic: act with ``network.sample(observation)`` instead of adding noise.
        records: what to return with each action, in this order (a learner's
            :attr:`~actorq.algos.base.Learner.records`): ``"log_prob"`` (the action's
            log-probability, from ``network.sample_with_log_prob``; stochastic policies
            only), ``"policy_version"`` (:attr:`policy_version`, per row), ``"worker"``
            (the index of the actor worker this policy runs in,
            :func:`~actorq.actors.processes.worker_index`, per row; -1 outside actor
            workers) and ``"output"`` (``network(observation)`` before exploration,
            :attr:`output_shape` per row; deterministic policies only). With any,
            ``forward`` returns a tuple ``(action, *records)``.

    Attributes:
        policy_version: int64 buffer, the version of the weights this policy holds (set by
            the experience pipeline at every push; pushed to the actors with them). A
            network that carries its own version under its sequence lock
            (:class:`~actorq.quant.QuantizedNetwork`) labels recorded steps with that instead.
    """

    def __init__(self, network: nn.Module, spec: EnvSpec, noise_scale: float, stochastic: bool = False,
                 records: Sequence[str] = ()):
        super().__init__()
        if stochastic and not hasattr(network, "sample"):
            raise ValueError(f"a stochastic policy needs a network with sample(), got {type(network).__name__}")
        unknown = [name for name in records if name not in RECORDS]
        if unknown:
            raise ValueError(f"actors cannot record {unknown}; they record {list(RECORDS)}")
        if "log_prob" in records and not (stochastic and hasattr(network, "sample_with_log_prob")):
            raise ValueError("recording log_prob needs a stochastic policy whose network has sample_with_log_prob(), "
                             f"got {type(network).__name__}")
        if "output" in records and stochastic:
            raise ValueError("recording output needs a deterministic policy (one that explores with noise); "
                             "a stochastic policy records log_prob")
        self.network = network
        self._versioned = hasattr(network, "sample_with_log_prob_and_version")
        self._versioned_forward = hasattr(network, "forward_with_version")
        self.stochastic = stochastic
        self.records = tuple(records)
        self._worker = (-1, torch.tensor(-1))  # (recorded_worker(), as a tensor): the process's own
        self.discrete = spec.discrete
        self.num_actions = spec.num_actions
        self._event_dims = len(spec.observation_shape)
        self.register_buffer("noise_scale", torch.tensor(float(noise_scale)))
        self.register_buffer("policy_version", torch.zeros((), dtype=torch.int64))
        if not spec.discrete:
            self.register_buffer("low", torch.tensor(spec.action_low, dtype=torch.float32))
            self.register_buffer("high", torch.tensor(spec.action_high, dtype=torch.float32))
            self.register_buffer("half_range", (self.high - self.low) / 2, persistent=False)

    def forward(self, observation: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        # Called once per actor step: direct dict lookups, since nn.Module.__getattr__ costs
        # microseconds, as much as a small actor's elementwise op.
        unbatched = observation.dim() == self._event_dims  # one env's observation (one frame stack, one vector)
        obs = observation.unsqueeze(0) if unbatched else observation
        network = self._modules["network"]
        with torch.no_grad():
            if self.records:
                return self._recorded(network, obs, unbatched)
            action = network.sample(obs) if self.stochastic else self._explore(network.forward(obs))
        return action.squeeze(0) if unbatched else action

    def _recorded(self, network: nn.Module, obs: torch.Tensor, unbatched: bool) -> tuple[torch.Tensor, ...]:
        """``(action, *records)`` for a batch of observations."""
        version = self._buffers["policy_version"]
        if "log_prob" in self.records and self._versioned:  # action, log-prob and label of one snapshot
            action, log_prob, version = network.sample_with_log_prob_and_version(obs)
        elif "log_prob" in self.records:
            action, log_prob = network.sample_with_log_prob(obs)
        elif "output" in self.records:  # the output and its label from one snapshot
            output, version = network.forward_with_version(obs) if self._versioned_forward else (network(obs), version)
            action = self._explore(output)
        else:
            action = network.sample(obs) if self.stochastic else self._explore(network.forward(obs))
        rows = obs.shape[0]
        values = {"policy_version": version.expand(rows)}
        if "log_prob" in self.records:
            values["log_prob"] = log_prob
        if "output" in self.records:
            values["output"] = output
        if "worker" in self.records:
            values["worker"] = self._worker_index().expand(rows)
        out = (action, *(values[name] for name in self.records))
        return tuple(value.squeeze(0) for value in out) if unbatched else out

    @property
    def output_shape(self) -> tuple[int, ...]:
        """The shape of one row's ``network(observation)``: Q-values for discrete actions,
        the action itself for continuous ones."""
        return (self.num_actions,) if self.discrete else tuple(self.low.shape)

    def _worker_index(self) -> torch.Tensor:
        """This process's actor worker index as an int64 scalar (-1 outside actor workers).
        Checked at every call: a policy pickled into a worker arrives with what it held in
        the learner's process."""
        index = recorded_worker()
        if self._worker[0] != index:
            self._worker = (index, torch.tensor(index))
        return self._worker[1]

    def _explore(self, out: torch.Tensor) -> torch.Tensor:
        buffers = self._buffers
        if self.discrete:
            greedy = out.argmax(dim=-1)
            random = torch.randint_like(greedy, self.num_actions)
            explore = torch.rand(greedy.shape) < buffers["noise_scale"]
            return torch.where(explore, random, greedy)
        sigma = buffers["noise_scale"] * buffers["half_range"]
        return torch.addcmul(out, torch.randn_like(out), sigma).clamp_(buffers["low"], buffers["high"])


class ActingLearner(Protocol):
    """What the actors' policy is made from: the acting parts of a learner
    (:class:`~actorq.algos.base.Learner` has them; the actors never need the rest)."""

    behaviour_network: nn.Module
    spec: EnvSpec
    noise_scale: float
    stochastic: bool
    records: tuple[str, ...]


def learner_policy(learner: ActingLearner) -> ExplorationPolicy:
    """The learner's policy as the actors would run it at fp32: its live behaviour network
    with the current exploration scale (a new wrapper each call; the network is shared).

    Args:
        learner: an :class:`~actorq.algos.base.Learner` (its ``behaviour_network``,
            ``spec``, ``noise_scale`` and ``stochastic``).
    """
    return ExplorationPolicy(learner.behaviour_network, learner.spec, learner.noise_scale,
                             stochastic=learner.stochastic, records=learner.records)


def actor_policy(learner: ActingLearner, quant: QuantSpec, observations: torch.Tensor) -> ExplorationPolicy:
    """The actors' own copy of the learner's policy, its network encoded at ``quant``
    (fp32 included): it changes only when a push loads a new payload, never with the
    learner's optimizer steps.

    Args:
        learner: an :class:`~actorq.algos.base.Learner`.
        quant: the actors' precision, ``bits="auto"`` resolved.
        observations: calibration observations for static int8 (a few env steps' worth).

    Example:
        >>> from actorq.algos.dqn import DQN
        >>> from actorq.algos.base import Exploration
        >>> learner = DQN(EnvSpec(obs_dim=4, discrete=True, num_actions=2), Exploration(0.25), hidden=(32,))
        >>> policy = actor_policy(learner, QuantSpec(bits=8, mode="dynamic"), torch.randn(64, 4))
        >>> type(policy.network).__name__, policy.network is not learner.behaviour_network, float(policy.noise_scale)
        ('QuantizedNetwork', True, 0.25)
    """
    behaviour = learner.behaviour_network
    fallbacks = quant.fallbacks() if has_kl(behaviour) else ()  # the divergence budget's precisions
    network = QuantizedNetwork.from_network(behaviour, quant, observations, fallbacks)
    return ExplorationPolicy(network, learner.spec, learner.noise_scale, stochastic=learner.stochastic,
                             records=learner.records)
