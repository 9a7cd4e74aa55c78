"""Evaluation: deterministic episodes of the learner's fp32 policy on a schedule.

Example:
    >>> evaluation = Evaluation(env_name="CartPole-v1", every_frames=10_000, episodes=5)
"""

from __future__ import annotations

import statistics

import lightning as L
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from actorq.envs import make_env, rollout_return


class Evaluation(Callback):
    """Runs ``episodes`` greedy episodes every ``every_frames`` env frames and at the end.

    Logs ``eval/return_mean`` and ``eval/return_std``; keeps ``history`` as
    ``[(frames, return_mean), ...]`` and ``best``/``last`` returns.

    Args:
        env_name: environment to evaluate on (a separate instance from the actors').
        every_frames: evaluation period in env frames.
        episodes: episodes per evaluation.
        seed: seed of the evaluation environment.
    """

    def __init__(self, env_name: str, every_frames: int, episodes: int = 10, seed: int = 12345):
        if every_frames <= 0 or episodes <= 0:
            raise ValueError("eval.every_frames and eval.episodes must be positive")
        self.env_name = env_name
        self.every_frames = every_frames
        self.episodes = episodes
        self.seed = seed
        self.next_frames = every_frames
        self.history: list[tuple[int, float]] = []
        self._env = None

    @property
    def best(self) -> float | None:
        return max((r for _, r in self.history), default=None)

    @property
    def last(self) -> float | None:
        return self.history[-1][1] if self.history else None

    def should_update(self, frames: int) -> bool:
        return frames >= self.next_frames

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.sanity_checking or not self.should_update(pl_module.frames):
            return
        while self.next_frames <= pl_module.frames:
            self.next_frames += self.every_frames
        self.evaluate(pl_module)

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module) -> None:
        if not self.history or self.history[-1][0] != pl_module.frames:
            self.evaluate(pl_module, log=False)
        if trainer.logger is not None:
            trainer.logger.log_metrics({"eval/return_mean": self.last}, step=pl_module.frames)

    def evaluate(self, pl_module, log: bool = True) -> float:
        """Runs the episodes now and records the mean return."""
        if self._env is None:
            self._env = make_env(self.env_name, seed=self.seed)
        returns = rollout_return(self._env, pl_module.act, self.episodes)
        mean = statistics.fmean(returns)
        self.history.append((pl_module.frames, mean))
        if log:
            pl_module.log_dict(
                {"eval/return_mean": mean, "eval/return_std": statistics.pstdev(returns)},
                on_step=True, on_epoch=False, batch_size=1,
            )
        return mean

    @override
    def state_dict(self) -> dict:
        return {"next_frames": self.next_frames, "history": list(self.history)}

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        self.next_frames = state_dict["next_frames"]
        self.history = [tuple(item) for item in state_dict["history"]]
