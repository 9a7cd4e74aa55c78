"""Raw simulators of one task, stepped in numpy: what a suite hands the lean batched env
(:class:`~actorq.envs.batched.LeanBatchedEnv`) through :meth:`EnvSuite.make_raw
<actorq.envs.registry.EnvSuite.make_raw>`. Each suite's raw envs live with the suite
(``dm_control.py``, ``gymnasium.py``)."""

from __future__ import annotations

import abc

import numpy as np


class RawEnvs(abc.ABC):
    """``n`` raw simulators of one task, stepped and reset in numpy.

    Subclasses fill ``obs_dim``, ``discrete``, ``num_actions`` or ``action_low``/``action_high``;
    envs whose observations are not a flat float32 vector (stacked uint8 frames) also set
    ``obs_shape`` and ``obs_dtype``.
    """

    n: int
    obs_dim: int
    obs_dtype: np.dtype = np.dtype(np.float32)
    """The dtype of an observation: float32 vectors, or uint8 frames."""

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """The shape of one env's observation: ``(obs_dim,)`` unless a subclass says otherwise."""
        return (self.obs_dim,)
    discrete: bool = False
    num_actions: int = 0
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None

    @abc.abstractmethod
    def step(self, actions: np.ndarray, obs: np.ndarray, reward: np.ndarray,
             terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Steps every env with ``actions[i]``, writing rows of the preallocated outputs."""

    @abc.abstractmethod
    def reset(self, index: int, obs: np.ndarray) -> None:
        """Resets env ``index`` and writes its first observation into ``obs`` (one row)."""

    @abc.abstractmethod
    def seed(self, index: int, seed: int) -> None:
        """Seeds env ``index`` exactly as the suite's single env's ``set_seed(seed)`` does."""
