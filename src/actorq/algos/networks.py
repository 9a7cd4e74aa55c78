"""Networks built from an :class:`~actorq.envs.EnvSpec`: shapes are never typed in YAML.

Every policy is a plain ``nn.Sequential`` MLP ("trunk") followed by a small head, so the
quantizers in :mod:`actorq.quant` can find the ``nn.Linear`` layers they replace.

Example:
    >>> from actorq.envs import EnvSpec
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> actor = DeterministicActor(spec, hidden=(64, 64))
    >>> actor(torch.zeros(5, 3)).shape
    torch.Size([5, 1])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from actorq.envs import EnvSpec


def mlp(
    in_dim: int, hidden: Sequence[int], out_dim: int, layer_norm: bool = False
) -> nn.Sequential:
    """``Linear -> [LayerNorm] -> ReLU`` per hidden width, then a final ``Linear``."""
    layers: list[nn.Module] = []
    width = in_dim
    for size in hidden:
        layers.append(nn.Linear(width, size))
        if layer_norm:
            layers.append(nn.LayerNorm(size))
        layers.append(nn.ReLU())
        width = size
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


def in_fp32(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` in float32 whatever autocast is on: a network's output layer under a
    bf16-mixed learner, so logits, means and values (and the log-probabilities, advantages
    and losses made of them) carry no bf16 rounding (bf16 rounds a log-probability near
    ``ln 4`` by ~0.008, and that enters every importance ratio). Outside autocast it is
    ``module(x)``.

    Example:
        >>> layer = nn.Linear(4, 2)
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     layer(torch.ones(1, 4)).dtype, in_fp32(layer, torch.ones(1, 4)).dtype
        (torch.bfloat16, torch.float32)
    """
    if not torch.is_autocast_enabled(x.device.type):
        return module(x)
    with torch.autocast(x.device.type, enabled=False):
        return module(x.float())


def through_fp32_output(layers: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``layers(x)``, the last layer run :func:`in_fp32` (the rest as autocast has them)."""
    *body, output = layers
    for layer in body:
        x = layer(x)
    return in_fp32(output, x)


class TanhScale(nn.Module):
    """Squashes to ``[-1, 1]`` with tanh, then maps onto the action bounds."""

    def __init__(self, low: Sequence[float], high: Sequence[float]):
        super().__init__()
        low_t = torch.as_tensor(low, dtype=torch.float32)
        high_t = torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("center", (high_t + low_t) / 2)
        self.register_buffer("half_range", (high_t - low_t) / 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.center, self.half_range, torch.tanh(x))


class DeterministicActor(nn.Module):
    """``obs -> action`` within the action bounds (DDPG, TD3, D4PG).

    Attributes:
        trunk: the MLP whose ``Linear`` layers quantization replaces.
        head: the tanh-and-rescale output layer (kept in full precision).
    """

    def __init__(self, spec: EnvSpec, hidden: Sequence[int]):
        super().__init__()
        if spec.discrete:
            raise ValueError("DeterministicActor needs a continuous action space")
        self.trunk = mlp(spec.obs_dim, hidden, spec.action_dim)
        self.head = TanhScale(spec.action_low, spec.action_high)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(observation))


class SquashedGaussianHead(nn.Module):
    """Trunk output ``[mean, log_std]`` -> a tanh-squashed Gaussian over the action bounds (SAC).

    ``forward`` is the deterministic action ``tanh(mean)`` (rescaled), so evaluation, export and
    quantization-fidelity checks see the same kind of output as a deterministic actor;
    :meth:`sample` and :meth:`rsample_with_log_prob` draw from the distribution.

    Args:
        low: lower action bound per dimension.
        high: upper action bound per dimension.
        log_std_min: smallest log standard deviation (before squashing).
        log_std_max: largest log standard deviation.
    """

    def __init__(
        self,
        low: Sequence[float],
        high: Sequence[float],
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
    ):
        super().__init__()
        self.squash = TanhScale(low, high)
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean, _ = x.chunk(2, dim=-1)
        return self.squash(mean)

    def distribution(self, x: torch.Tensor) -> torch.distributions.Normal:
        """The Gaussian before squashing."""
        mean, log_std = x.chunk(2, dim=-1)
        log_std = log_std.clamp(self.log_std_min, self.log_std_max)
        return torch.distributions.Normal(mean, log_std.exp())

    def sample(self, x: torch.Tensor) -> torch.Tensor:
        """A random action within the bounds (what the actors run)."""
        return self.squash(self.distribution(x).sample())

    def rsample_with_log_prob(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action and its log-density, summed over action dimensions."""
        gaussian = self.distribution(x)
        u = gaussian.rsample()
        # log|d action / d u| = log(half_range) + log(1 - tanh(u)^2), written stably.
        log_det = torch.log(self.squash.half_range) + 2 * (math.log(2) - u - F.softplus(-2 * u))
        log_prob = (gaussian.log_prob(u) - log_det).sum(-1)
        return self.squash(u), log_prob


class GaussianActor(nn.Module):
    """``obs -> action`` from a tanh-squashed Gaussian policy (SAC).

    Attributes:
        trunk: the MLP (``obs -> [mean, log_std]``) whose ``Linear`` layers quantization replaces.
        head: a :class:`SquashedGaussianHead` (kept in full precision).

    Example:
        >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
        >>> actor = GaussianActor(spec, hidden=(64, 64))
        >>> actor(torch.zeros(5, 3)).shape, actor.sample(torch.zeros(5, 3)).shape
        (torch.Size([5, 1]), torch.Size([5, 1]))
    """

    def __init__(self, spec: EnvSpec, hidden: Sequence[int]):
        super().__init__()
        if spec.discrete:
            raise ValueError("GaussianActor needs a continuous action space")
        self.trunk = mlp(spec.obs_dim, hidden, 2 * spec.action_dim)
        self.head = SquashedGaussianHead(spec.action_low, spec.action_high)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """The deterministic action (the squashed mean)."""
        return self.head(self.trunk(observation))

    def sample(self, observation: torch.Tensor) -> torch.Tensor:
        """A random action from the policy."""
        return self.head.sample(self.trunk(observation))

    def rsample_with_log_prob(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action and its log-probability (for the learner)."""
        return self.head.rsample_with_log_prob(self.trunk(observation))


class QNetwork(nn.Module):
    """``obs -> Q(obs, a)`` for every discrete action (DQN).

    Attributes:
        trunk: the MLP whose ``Linear`` layers quantization replaces.
        head: identity, so every policy has the same ``trunk``/``head`` shape.
    """

    def __init__(self, spec: EnvSpec, hidden: Sequence[int]):
        super().__init__()
        if not spec.discrete:
            raise ValueError("QNetwork needs a discrete action space")
        self.trunk = mlp(spec.obs_dim, hidden, spec.num_actions)
        self.head = nn.Identity()

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(observation))


class CategoricalHead(nn.Module):
    """Trunk output (logits) -> a categorical distribution over the discrete actions (A2C, PPO).

    ``forward`` returns the logits themselves, so the greedy action is their argmax, as for a
    Q-network (evaluation, export, quantization-fidelity checks). Sampling is written out
    rather than built on ``torch.distributions.Categorical``: an actor samples once per step,
    often at batch 1, where the distribution object's construction costs more than the draw.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def sample(self, x: torch.Tensor) -> torch.Tensor:
        """A random action per row."""
        return self.sample_with_log_prob(x)[0]

    def sample_with_log_prob(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A random action per row and its log-probability (what on-policy actors record)."""
        log_probs = F.log_softmax(x, dim=-1)
        flat = log_probs.reshape(-1, log_probs.shape[-1])
        action = torch.multinomial(flat.exp(), 1)
        return action.reshape(x.shape[:-1]), flat.gather(-1, action).reshape(x.shape[:-1])

    def log_prob(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``log pi(action | features)`` per row."""
        log_probs = F.log_softmax(x, dim=-1)
        return log_probs.gather(-1, action.long().reshape(*x.shape[:-1], 1)).squeeze(-1)

    def distribution(self, x: torch.Tensor) -> torch.distributions.Categorical:
        """The distribution itself (what fidelity checks compare exactly)."""
        return torch.distributions.Categorical(logits=x)

    def entropy(self, x: torch.Tensor) -> torch.Tensor:
        """The distribution's entropy per row."""
        log_probs = F.log_softmax(x, dim=-1)
        return -(log_probs.exp() * log_probs).sum(-1)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class GaussianHead(nn.Module):
    """Trunk output (the mean) -> a diagonal Gaussian whose log standard deviation is a learned
    parameter of its own, independent of the state (PPO for continuous actions).

    Actions are sampled unbounded, and their log-probability is the Gaussian's; the env
    clips them to its bounds when it steps (as SB3 and CleanRL do), so the probability of
    what the policy chose is exact. ``forward`` is the deterministic action, the mean
    clipped to the bounds (evaluation, export, quantization-fidelity checks).

    Args:
        low, high: the action bounds per dimension.
        log_std_init: initial log standard deviation of every dimension.
    """

    def __init__(self, low: Sequence[float], high: Sequence[float], log_std_init: float = 0.0):
        super().__init__()
        self.register_buffer("low", torch.tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.tensor(high, dtype=torch.float32))
        self.log_std = nn.Parameter(torch.full((len(low),), float(log_std_init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(x, self.high), self.low)

    def distribution(self, x: torch.Tensor) -> torch.distributions.Normal:
        """The Gaussian itself, its mean unclipped (what fidelity checks compare exactly)."""
        return torch.distributions.Normal(x, self.log_std.exp().expand_as(x))

    def sample(self, x: torch.Tensor) -> torch.Tensor:
        """A random (unclipped) action per row."""
        return self.sample_with_log_prob(x)[0]

    def sample_with_log_prob(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A random (unclipped) action per row and its log-density, summed over dimensions."""
        noise = torch.randn_like(x)
        action = x + noise * self.log_std.exp()
        return action, -(0.5 * noise.pow(2) + self.log_std + _LOG_SQRT_2PI).sum(-1)

    def log_prob(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``log pi(action | features)`` per row (summed over action dimensions)."""
        z = (action - x) * torch.exp(-self.log_std)
        return -(0.5 * z.pow(2) + self.log_std + _LOG_SQRT_2PI).sum(-1)

    def entropy(self, x: torch.Tensor) -> torch.Tensor:
        """The distribution's entropy per row (the same for every state)."""
        return (self.log_std + 0.5 + _LOG_SQRT_2PI).sum().expand(x.shape[:-1])


class ObservationNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with running statistics held as
    buffers, so they are saved with the policy, pushed to the actors with its weights and used
    by every copy of it (evaluation, ``actorq.load``, export): a policy never runs without the
    normalization it was trained with.

    Only the learner updates the statistics (:meth:`update`, with each rollout's
    observations); the actors read them as pushed.

    Example:
        >>> normalizer = ObservationNormalizer(2)
        >>> normalizer.update(torch.tensor([[1.0, 10.0], [3.0, 30.0]]))
        >>> normalizer(torch.tensor([[2.0, 20.0]]))
        tensor([[0., 0.]])
    """

    def __init__(self, obs_dim: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("var", torch.ones(obs_dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return ((observation - self.mean) * torch.rsqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    def update(self, observations: torch.Tensor) -> None:
        """Merges the statistics of ``observations`` ``[..., obs_dim]`` into the running ones."""
        merge_moments(self.mean, self.var, self.count, observations.reshape(-1, observations.shape[-1]))


@torch.no_grad()
def merge_moments(mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor, batch: torch.Tensor) -> None:
    """Merges the mean and (population) variance of ``batch`` ``[N, ...]`` into the running
    ``mean``, ``var`` and ``count``, in place (Chan et al.'s parallel update)."""
    n, total = float(len(batch)), float(count)
    if n == 0:
        return
    batch = batch.double()
    delta = batch.mean(0) - mean.double()
    merged = total + n
    m2 = var.double() * total + batch.var(0, unbiased=False) * n + delta.pow(2) * total * n / merged
    mean.copy_(mean.double() + delta * n / merged)
    var.copy_(m2 / merged)
    count.fill_(merged)


class StochasticPolicy(nn.Module):
    """``obs -> head(trunk(normalizer(obs)))``: a policy that samples its own actions (A2C, PPO).

    Attributes:
        normalizer: an :class:`ObservationNormalizer`, or ``nn.Identity`` when observations
            are used as they are.
        trunk: the MLP whose ``Linear`` layers quantization replaces.
        head: the distribution over actions (kept in full precision).
    """

    def __init__(self, trunk: nn.Sequential, head: nn.Module, normalizer: nn.Module | None = None):
        super().__init__()
        self.normalizer = normalizer if normalizer is not None else nn.Identity()
        self.trunk = trunk
        self.head = head

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.normalizer(observation))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """The deterministic action's output (logits, or the clipped mean)."""
        return self.head(self.features(observation))

    def sample(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head.sample(self.features(observation))

    def sample_with_log_prob(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head.sample_with_log_prob(self.features(observation))

    def log_prob(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.head.log_prob(self.features(observation), action)

    def entropy(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head.entropy(self.features(observation))


def _normalizer(spec: EnvSpec, normalize_observations: bool) -> nn.Module | None:
    return ObservationNormalizer(spec.obs_dim) if normalize_observations else None


class CategoricalPolicy(StochasticPolicy):
    """``obs -> logits`` of a categorical policy over discrete actions (A2C, PPO).

    Example:
        >>> policy = CategoricalPolicy(EnvSpec(obs_dim=4, discrete=True, num_actions=2), hidden=(16,))
        >>> action, log_prob = policy.sample_with_log_prob(torch.zeros(5, 4))
        >>> action.shape, bool(torch.allclose(log_prob, policy.log_prob(torch.zeros(5, 4), action)))
        (torch.Size([5]), True)
    """

    def __init__(self, spec: EnvSpec, hidden: Sequence[int], normalize_observations: bool = False):
        if not spec.discrete:
            raise ValueError("CategoricalPolicy needs a discrete action space")
        super().__init__(mlp(spec.obs_dim, hidden, spec.num_actions), CategoricalHead(),
                         _normalizer(spec, normalize_observations))


class GaussianPolicy(StochasticPolicy):
    """``obs -> mean`` of a diagonal Gaussian policy with a state-independent log-std (PPO).

    Example:
        >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=2, action_low=(-1.0, -1.0), action_high=(1.0, 1.0))
        >>> policy = GaussianPolicy(spec, hidden=(16,), log_std_init=-1.0)
        >>> action, log_prob = policy.sample_with_log_prob(torch.zeros(5, 3))
        >>> action.shape, bool(torch.allclose(log_prob, policy.log_prob(torch.zeros(5, 3), action)))
        (torch.Size([5, 2]), True)
    """

    def __init__(self, spec: EnvSpec, hidden: Sequence[int], log_std_init: float = 0.0,
                 normalize_observations: bool = False):
        if spec.discrete:
            raise ValueError("GaussianPolicy needs a continuous action space")
        super().__init__(mlp(spec.obs_dim, hidden, spec.action_dim),
                         GaussianHead(spec.action_low, spec.action_high, log_std_init),
                         _normalizer(spec, normalize_observations))


class Critic(nn.Module):
    """``(obs, action) -> value``: one scalar, or ``out_dim`` logits for a distributional critic."""

    def __init__(
        self, spec: EnvSpec, hidden: Sequence[int], layer_norm: bool = False, out_dim: int = 1
    ):
        super().__init__()
        self.out_dim = out_dim
        self.net = mlp(spec.obs_dim + spec.action_dim, hidden, out_dim, layer_norm=layer_norm)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        out = self.net(torch.cat([observation, action], dim=-1))
        return out.squeeze(-1) if self.out_dim == 1 else out


class StackedLinear(nn.Module):
    """``E`` ``nn.Linear`` layers of one shape as one: ``weight [E, in, out]`` (each layer's
    weight transposed, so the batched matmul reads it without a copy), ``bias [E, out]``.

    ``forward`` takes ``[B, in]`` (one input for all ``E``) or ``[E, B, in]`` and returns
    ``[E, B, out]`` with one batched matmul; :meth:`one` runs layer ``i`` alone.
    """

    def __init__(self, layers: Sequence[nn.Linear]):
        super().__init__()
        self.weight = nn.Parameter(torch.stack([layer.weight.detach().t() for layer in layers]).contiguous())
        self.bias = nn.Parameter(torch.stack([layer.bias.detach() for layer in layers]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.expand(len(self.weight), *x.shape)
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight)

    def one(self, i: int, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias[i], x, self.weight[i])


class StackedLayerNorm(nn.Module):
    """``E`` ``nn.LayerNorm`` layers of one shape as one (affine parameters ``[E, size]``)."""

    def __init__(self, layers: Sequence[nn.LayerNorm]):
        super().__init__()
        self.shape, self.eps = layers[0].normalized_shape, layers[0].eps
        self.weight = nn.Parameter(torch.stack([layer.weight.detach() for layer in layers]))
        self.bias = nn.Parameter(torch.stack([layer.bias.detach() for layer in layers]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.bias.unsqueeze(1), F.layer_norm(x, self.shape, eps=self.eps), self.weight.unsqueeze(1))

    def one(self, i: int, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.shape, self.weight[i], self.bias[i], self.eps)


class CriticEnsemble(nn.Module):
    """``E`` :class:`Critic` s of one shape evaluated as one network: each layer's weights are
    stacked (``net.0.weight`` is ``[E, in, out]``, see :class:`StackedLinear`) and one batched
    matmul per layer serves every critic, instead of ``E`` small ones.

    ``ensemble(obs, action)`` is ``[E, B]`` (``[E, B, out_dim]`` for a distributional critic).
    ``ensemble[i]`` is critic ``i`` as a callable module of its own (``(obs, action) -> [B]``,
    computed from slices of the stacked weights, so gradients reach them); iterating and ``len``
    work as on an ``nn.ModuleList`` of critics. Its weights are the critics' own, so
    ``CriticEnsemble(critics)[i](s, a)`` equals ``critics[i](s, a)``.

    A state dict saved from an ``nn.ModuleList`` of critics (``0.net.0.weight``, ...) loads:
    the per-critic tensors are stacked (linear weights transposed) on the way in.

    Example:
        >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
        >>> critics = [Critic(spec, (8, 8)) for _ in range(2)]
        >>> ensemble = CriticEnsemble(critics)
        >>> s, a = torch.zeros(5, 3), torch.zeros(5, 1)
        >>> ensemble(s, a).shape, len(ensemble), torch.allclose(ensemble[1](s, a), critics[1](s, a))
        (torch.Size([2, 5]), 2, True)
    """

    def __init__(self, critics: Sequence[Critic]):
        super().__init__()
        self.out_dim = critics[0].out_dim
        self.size = len(critics)
        stacked = {nn.Linear: StackedLinear, nn.LayerNorm: StackedLayerNorm}
        self.net = nn.Sequential(*(
            stacked[type(layer)]([critic.net[position] for critic in critics]) if type(layer) in stacked else layer
            for position, layer in enumerate(critics[0].net)
        ))
        self._register_load_state_dict_pre_hook(self._stack_per_critic_tensors)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        out = self.net(torch.cat([observation, action], dim=-1))
        return out.squeeze(-1) if self.out_dim == 1 else out

    def one(self, i: int, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Critic ``i`` alone."""
        x = torch.cat([observation, action], dim=-1)
        for layer in self.net:
            x = layer.one(i, x) if hasattr(layer, "one") else layer(x)
        return x.squeeze(-1) if self.out_dim == 1 else x

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> nn.Module:
        if not -self.size <= i < self.size:
            raise IndexError(f"critic {i} of an ensemble of {self.size}")
        return OneCritic(self, i % self.size)

    def __iter__(self):
        return (self[i] for i in range(self.size))

    def _stack_per_critic_tensors(self, state_dict, prefix, *args) -> None:
        for name, _ in self.named_parameters():
            per_critic = [f"{prefix}{i}.{name}" for i in range(self.size)]
            if prefix + name not in state_dict and all(key in state_dict for key in per_critic):
                tensors = [state_dict.pop(key) for key in per_critic]
                if isinstance(self.get_submodule(name.rsplit(".", 1)[0]), StackedLinear) and name.endswith("weight"):
                    tensors = [tensor.t() for tensor in tensors]
                state_dict[prefix + name] = torch.stack(tensors).contiguous()


class OneCritic(nn.Module):
    """Critic ``index`` of a :class:`CriticEnsemble`, as a module of its own."""

    def __init__(self, ensemble: CriticEnsemble, index: int):
        super().__init__()
        self.ensemble, self.index = ensemble, index

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.ensemble.one(self.index, observation, action)
