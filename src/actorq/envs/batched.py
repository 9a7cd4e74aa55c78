"""A lean batched environment: ``N`` raw envs stepped in numpy behind one TorchRL ``EnvBase``.

An actor worker steps all its envs with one policy call per step. :class:`LeanBatchedEnv`
holds ``N`` raw simulators (``dm_control`` suite envs, or ``gymnasium`` envs), builds ONE
TensorDict per batch step and does, on whole arrays, what the stacked transforms of
:func:`actorq.envs.make_env` do per env: flattening the observation (dm_control's dict, in
``CatTensors``' sorted key order), float32 casts (``DoubleToFloat``), ``done`` /
``terminated`` / ``truncated``, and the running ``"episode_reward"`` (``RewardSum``). Env
``i`` behaves step for step like ``make_env(name, seed=s_i)`` where ``s_0`` is the seed and
``s_{i+1} = seed_generator(s_i)`` (TorchRL's ``SerialEnv`` chain), which
``tests/unit/test_batched_env.py`` checks.

:meth:`LeanBatchedEnv.step_and_maybe_reset` (what a TorchRL collector calls once per step)
is overridden: it steps every env, resets the ones that ended in the same pass, and builds
the two TensorDicts the collector expects, skipping ``EnvBase.step``'s per-step spec and
shape processing. ``reset`` honours TorchRL's ``_reset`` mask (only those envs restart).

With ``num_envs=None`` the env is unbatched (``batch_size=[]``), like a single
``make_env``; otherwise ``batch_size=[num_envs]``.

Example:
    >>> from actorq.envs import make_batched_env
    >>> env = make_batched_env("CartPole-v1", num_envs=4, seed=0, library="gymnasium")
    >>> env.batch_size, env.observation_spec["observation"].shape
    (torch.Size([4]), torch.Size([4, 4]))
    >>> td = env.reset()
    >>> td["action"] = env.full_action_spec["action"].rand()
    >>> step, after = env.step_and_maybe_reset(td)
    >>> step["next", "reward"].shape, after["episode_reward"].dtype
    (torch.Size([4, 1]), torch.float32)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from actorq.envs.raw import RawEnvs
from actorq.envs.spec import EPISODE_REWARD, OBSERVATION
from actorq.util.torchrl_adapter import next_seed, tensordict_unchecked

_DONE_KEYS = ("done", "terminated", "truncated")
_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.uint8): torch.uint8}
"""The observation dtypes raw envs may have, as torch names them."""


class StepArrays(NamedTuple):
    """One batch step of ``N`` envs as numpy arrays (rows are envs): the ``"next"`` entries."""

    obs: np.ndarray  # [N, *obs_shape]: float32 vectors, or uint8 frames
    reward: np.ndarray  # [N, 1] float32
    episode_reward: np.ndarray  # [N, 1] float32, the running return including this reward
    terminated: np.ndarray  # [N, 1] bool
    truncated: np.ndarray  # [N, 1] bool
    done: np.ndarray  # [N, 1] bool

    def entries(self, tensor: Callable[[np.ndarray], torch.Tensor]) -> dict[str, torch.Tensor]:
        """The ``"next"`` entries of a TensorDict, each array through ``tensor``."""
        return {OBSERVATION: tensor(self.obs), "reward": tensor(self.reward),
                EPISODE_REWARD: tensor(self.episode_reward), "done": tensor(self.done),
                "terminated": tensor(self.terminated), "truncated": tensor(self.truncated)}


class _State:
    def __init__(self, episode: np.ndarray, obs: np.ndarray):
        self.episode = episode  # running return of each env (RewardSum's "episode_reward")
        self.obs = obs  # the current observation of each env


class LeanBatchedEnv(EnvBase):
    """``num_envs`` raw envs behind one TorchRL env, one TensorDict per batch step.

    Args:
        raw: the raw envs (:class:`DMControlEnvs`, :class:`GymnasiumEnvs`).
        batched: ``False`` makes an unbatched env (``batch_size=[]``, ``raw.n`` must be 1).
        seed: seeds env ``i`` with the ``i``-th seed of TorchRL's chain from ``seed``.
    """

    def __init__(self, raw: RawEnvs, batched: bool = True, seed: int | None = None):
        if not batched and raw.n != 1:
            raise ValueError(f"an unbatched env holds one env, got {raw.n}")
        n = raw.n
        batch = (n,) if batched else ()
        super().__init__(batch_size=torch.Size(batch))
        self.raw = raw
        self._n = n
        self._batched = batched
        self.observation_spec = Composite(
            {OBSERVATION: Unbounded((*batch, *raw.obs_shape), dtype=_TORCH_DTYPES[np.dtype(raw.obs_dtype)]),
             EPISODE_REWARD: Unbounded((*batch, 1), dtype=torch.float32)},
            shape=batch,
        )
        self.reward_spec = Unbounded((*batch, 1), dtype=torch.float32)
        self.done_spec = Composite(
            {key: Categorical(2, (*batch, 1), dtype=torch.bool) for key in _DONE_KEYS}, shape=batch
        )
        if raw.discrete:
            self.action_spec = Categorical(raw.num_actions, batch, dtype=torch.int64)
        else:
            low = torch.as_tensor(raw.action_low).expand(*batch, len(raw.action_low))
            high = torch.as_tensor(raw.action_high).expand(*batch, len(raw.action_high))
            self.action_spec = Bounded(low.clone(), high.clone(), (*batch, len(raw.action_low)),
                                       dtype=torch.float32)
        # Mutable per-step state lives in a plain namespace: assigning attributes of an
        # nn.Module (EnvBase is one) costs microseconds per call.
        self._state = _State(episode=np.zeros((n, 1), dtype=np.float32),
                             obs=np.zeros((n, *raw.obs_shape), dtype=raw.obs_dtype))
        self._action_shape = (n,) if raw.discrete else (n, len(raw.action_low))
        # Continuous actions are clipped to the bounds here: a stochastic policy (PPO's
        # Gaussian) samples past them, and its log-probability is of what it sampled.
        self._bounds = None if raw.discrete else (np.asarray(raw.action_low, dtype=np.float32),
                                                  np.asarray(raw.action_high, dtype=np.float32))
        self._false = torch.zeros((*batch, 1), dtype=torch.bool)
        if seed is not None:
            self.set_seed(seed)

    # --- seeding ------------------------------------------------------------------------
    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seeds env ``i`` with the ``i``-th seed of the chain; returns the next seed."""
        if seed is None:
            return None
        for i in range(self._n):
            self.raw.seed(i, seed)
            if not static_seed:
                seed = next_seed(seed)
        return seed

    def _set_seed(self, seed: int | None) -> None:  # pragma: no cover - set_seed is overridden
        self.set_seed(seed)

    # --- helpers ------------------------------------------------------------------------
    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array if self._batched else array[0])

    def _actions(self, tensordict: TensorDictBase) -> np.ndarray:
        return tensordict.get("action").numpy()

    def _root(self, obs: np.ndarray) -> TensorDict:
        false = self._false
        return tensordict_unchecked(
            {OBSERVATION: self._tensor(obs), EPISODE_REWARD: self._tensor(self._state.episode.copy()),
             "done": false.clone(), "terminated": false.clone(), "truncated": false.clone()},
            batch_size=self.batch_size,
        )

    def step_numpy(self, actions: np.ndarray) -> StepArrays:
        """Steps every env with ``actions`` (``[N]`` indices or ``[N, act_dim]``, clipped to the
        action bounds) and adds the rewards to the running returns; ended envs are not
        restarted (see :meth:`restart_ended`)."""
        n = self._n
        actions = actions.reshape(self._action_shape)
        if self._bounds is not None:
            actions = np.clip(actions, *self._bounds)
        obs = np.empty((n, *self.raw.obs_shape), dtype=self.raw.obs_dtype)
        reward = np.empty((n, 1), dtype=np.float32)
        terminated = np.zeros((n, 1), dtype=bool)
        truncated = np.zeros((n, 1), dtype=bool)
        self.raw.step(actions, obs, reward, terminated, truncated)
        episode = self._state.episode
        episode += reward
        return StepArrays(obs, reward, episode.copy(), terminated, truncated, terminated | truncated)

    def restart_ended(self, step: StepArrays) -> np.ndarray:
        """Restarts the envs that ended in ``step`` (their running returns back to 0) and
        returns the observations the next step starts from (``step.obs`` itself stays as it is)."""
        obs = step.obs
        if step.done.any():
            obs = obs.copy()
            self._reset_rows(np.flatnonzero(step.done[:, 0]), obs)
        self._state.obs = obs
        return obs

    @property
    def num_envs(self) -> int:
        """How many raw envs step together (1 for an unbatched env)."""
        return self._n

    @property
    def batched(self) -> bool:
        """``False`` for an unbatched env (``batch_size=[]``)."""
        return self._batched

    @property
    def observation(self) -> np.ndarray:
        """The observations the next step starts from, ``[N, *obs_shape]``."""
        return self._state.obs

    @property
    def episode_reward(self) -> np.ndarray:
        """The running return of each env, ``[N, 1]`` (0 right after a restart)."""
        return self._state.episode

    def _next_td(self, step: StepArrays) -> TensorDict:
        return tensordict_unchecked(step.entries(self._tensor), batch_size=self.batch_size)

    def _reset_rows(self, rows, obs: np.ndarray) -> None:
        for i in rows:
            self.raw.reset(int(i), obs[i])
            self._state.episode[i] = 0.0

    # --- TorchRL hooks ------------------------------------------------------------------
    def step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """One batch step, then the ended envs restart: ``(step data with "next", next root)``."""
        step = self.step_numpy(self._actions(tensordict))
        tensordict.set("next", self._next_td(step))
        return tensordict, self._root(self.restart_ended(step))

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        step = self.step_numpy(self._actions(tensordict))
        self._state.obs = step.obs
        return self._next_td(step)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        obs = self._state.obs.copy()
        rows = range(self._n) if mask is None else np.flatnonzero(mask.reshape(self._n).numpy())
        self._reset_rows(rows, obs)
        self._state.obs = obs
        return self._root(obs)

    def close(self, *, raise_if_closed: bool = True) -> None:
        for env in getattr(self.raw, "envs", ()):
            env.close()
        self.is_closed = True
