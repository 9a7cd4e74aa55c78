"""What every environment made by :func:`actorq.envs.make_env` looks like, and helpers on it.

Example:
    >>> from actorq.envs import make_env
    >>> env = make_env("CartPole-v1", seed=0, library="gymnasium")
    >>> EnvSpec.from_env(env)
    EnvSpec(obs_dim=4, discrete=True, num_actions=2, action_dim=0, action_low=(), action_high=())
    >>> random_observations(env, 5).shape
    torch.Size([5, 4])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

OBSERVATION = "observation"
"""The key of every environment's observation: a flat float32 vector, or stacked uint8 frames."""
EPISODE_REWARD = "episode_reward"
"""The key of the running return of the current episode (TorchRL's ``RewardSum``)."""


@dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know about an environment.

    Attributes:
        obs_dim: length of the flat observation vector.
        discrete: whether actions are integer indices.
        num_actions: number of discrete actions (0 for continuous).
        action_dim: length of a continuous action (0 for discrete).
        action_low: lower bound per continuous action dimension.
        action_high: upper bound per continuous action dimension.
        frame_shape: ``(channels, height, width)`` for an env that shows stacked uint8 frames
            (``obs_dim`` is then their number of pixels); ``()`` for a flat float32 vector.
    """

    obs_dim: int
    discrete: bool
    num_actions: int = 0
    action_dim: int = 0
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    frame_shape: tuple[int, ...] = field(default=(), repr=False)

    @property
    def pixels(self) -> bool:
        """Whether observations are stacked uint8 frames (a convolutional policy's input)."""
        return bool(self.frame_shape)

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """One observation's shape: ``frame_shape``, or ``(obs_dim,)``."""
        return self.frame_shape or (self.obs_dim,)

    @property
    def observation_dtype(self) -> torch.dtype:
        """uint8 for frames, float32 for vectors."""
        return torch.uint8 if self.pixels else torch.float32

    @classmethod
    def from_env(cls, env: EnvBase) -> EnvSpec:
        """Reads the spec of an environment made by :func:`actorq.envs.make_env`."""
        observation = env.observation_spec[OBSERVATION]
        event_shape = tuple(observation.shape[len(env.batch_size):])
        frame_shape = event_shape if observation.dtype == torch.uint8 else ()
        obs_dim = math.prod(event_shape)
        action_spec = env.full_action_spec[env.action_key]
        if action_spec.domain == "discrete":
            return cls(obs_dim=obs_dim, discrete=True, num_actions=int(action_spec.space.n), frame_shape=frame_shape)
        low = action_spec.space.low.reshape(-1).tolist()
        high = action_spec.space.high.reshape(-1).tolist()
        return cls(
            frame_shape=frame_shape,
            obs_dim=obs_dim,
            discrete=False,
            action_dim=len(low),
            action_low=tuple(low),
            action_high=tuple(high),
        )


def rollout_return(env: EnvBase, act, episodes: int, max_steps: int = 100_000) -> list[float]:
    """Runs ``episodes`` full episodes with ``act(observation) -> action`` and returns their returns.

    A batched env (``batch_size=[episodes]``, e.g. :func:`actorq.envs.make_batched_env`) plays
    one episode in each of its envs, all stepped together with one ``act`` call per step; an
    unbatched env plays them one after the other.

    Args:
        env: an environment made by :func:`actorq.envs.make_env` or a batch of ``episodes``.
        act: maps a batch of observations ``[B, obs_dim]`` to a batch of actions.
        episodes: how many episodes to run.
        max_steps: safety cap on the length of one episode.
    """
    if env.batch_size:
        if tuple(env.batch_size) != (episodes,):
            raise ValueError(f"a batched env plays one episode per env: {episodes} episodes "
                             f"need batch_size [{episodes}], got {list(env.batch_size)}")
        return _batched_returns(env, act, max_steps)
    returns = []
    with torch.no_grad():
        for _ in range(episodes):
            td = env.reset()
            total = 0.0
            for _ in range(max_steps):
                td["action"] = act(td[OBSERVATION].unsqueeze(0)).squeeze(0)
                td = env.step(td)
                total += float(td["next", "reward"].sum())
                if bool(td["next", "done"].any()):
                    break
                td = td["next"]
            returns.append(total)
    return returns


def _batched_returns(env: EnvBase, act, max_steps: int) -> list[float]:
    """The first episode's return in each env of a batch (envs that end early are reset and
    step on, unread, until the last one ends)."""
    n = env.batch_size[0]
    returns = torch.zeros(n, dtype=torch.float64)
    running = torch.ones(n, dtype=torch.bool)
    with torch.no_grad():
        td = env.reset()
        for _ in range(max_steps):
            td["action"] = act(td[OBSERVATION])
            step, td = env.step_and_maybe_reset(td)
            returns += step["next", "reward"].reshape(n).double() * running
            running &= ~step["next", "done"].reshape(n)
            if not running.any():
                break
    return returns.tolist()


def random_observations(env: EnvBase, count: int) -> torch.Tensor:
    """``count`` observations from uniformly random actions (``[count, *observation_shape]``)."""
    with torch.no_grad():
        steps = env.rollout(count, break_when_any_done=False)
    observations = steps[OBSERVATION]
    event_shape = observations.shape[len(env.batch_size) + 1:]
    return observations.reshape(-1, *event_shape)[:count]
