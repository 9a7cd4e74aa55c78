"""Evaluation: episodes of the learner's fp32 policy (and of the actors' quantized copy) on
a schedule, greedy by default or sampled from a stochastic policy.

The environment, the seed and the actors' policy come from the experience pipeline
(``trainer.datamodule``).

Example:
    >>> evaluation = Evaluation(every_frames=10_000, episodes=5)
    >>> evaluation.should_update(9_999), evaluation.should_update(10_000)
    (False, True)
"""

from __future__ import annotations

import logging
import statistics
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from actorq.callbacks.schedule import Every
from actorq.envs import rollout_return
from actorq.util.errors import ConfigError

logger = logging.getLogger(__name__)


class Evaluation(Callback):
    """Runs ``episodes`` episodes every ``every_frames`` env frames and at the end: greedy, or
    with ``deterministic=False`` sampled from a stochastic policy (PPO's), as RL Zoo evaluates
    Atari.

    Logs ``eval/return_mean`` and ``eval/return_std`` for the learner's fp32 policy, and
    ``eval/return_mean_quant`` for the reduced-precision policy the actors run (when it is
    not fp32), once per evaluation, at the env frame it ran at. Keeps ``history`` (and ``history_quant``) as ``[(frames, return_mean), ...]``.

    With ``stop_at_return``, the first scheduled evaluation whose fp32 mean reaches it stops the
    run there (Stable-Baselines3's ``StopTrainingOnRewardThreshold``): the actors stop, the
    run ends as at the end of its budget, and ``summary.json`` says at which frame
    (``stopped_at_frames``). A resumed run trains on and stops again at the next such
    evaluation (resume with ``eval.stop_at_return=null`` to play the whole budget).

    The actors' policy's episodes are time an fp32 run (and a peer library) does not spend:
    their seconds so far are logged as ``time/eval_quant_s`` (and ``eval_quant_s`` in the
    summary), so that wall-clock comparisons of the precisions can leave them out
    (:mod:`actorq.report`, ``benchmarks.results``).

    Both policies play the same episodes: the environment is seeded again before each one's
    episodes, so the two means differ by the precision only (on Pendulum, two sets of 10
    episodes of one policy differ by up to ~12%).

    Args:
        every_frames: evaluation period in env frames (``eval.every_frames``, checked with
            the run config, :mod:`actorq.run.checks`).
        episodes: episodes per evaluation (``eval.episodes``, likewise).
        max_steps: a cap on one episode's steps (``eval.max_steps``): an episode still running
            then counts with the return it has.
        seed_offset: the ``k``-th evaluation (from 0) seeds its environment with the run's
            seed plus this plus ``k``.
        deterministic: greedy actions (``eval.deterministic``); ``False`` samples them from
            the policy's distribution, which only a stochastic policy (PPO) has.
        stop_at_return: the mean return that stops the run (``eval.stop_at_return``, checked
            with the run config); ``None``: the whole budget.
    """

    def __init__(self, every_frames: int, episodes: int = 10, seed_offset: int = 10_000, max_steps: int = 100_000,
                 deterministic: bool = True, stop_at_return: float | None = None):
        self.every_frames = every_frames
        self.episodes = episodes
        self.max_steps = max_steps
        self.deterministic = deterministic
        self.seed_offset = seed_offset
        self.stop_at_return = stop_at_return
        self.stopped_at_frames: int | None = None
        self.schedule = Every(every_frames)
        self.history: list[tuple[int, float]] = []
        self.history_quant: list[tuple[int, float]] = []
        self.quant_seconds = 0.0
        self._env = None

    @property
    def best(self) -> float | None:
        return max((r for _, r in self.history), default=None)

    @property
    def last(self) -> float | None:
        return self.history[-1][1] if self.history else None

    @property
    def last_quant(self) -> float | None:
        return self.history_quant[-1][1] if self.history_quant else None

    def summary_fields(self) -> dict:
        """The run's returns for ``summary.json``: the last and best evaluations of the fp32
        policy, the last of the actors' policy, every evaluation ``(frames, mean)``, and the
        frame the run stopped at for reaching ``stop_at_return`` (``None``: it did not)."""
        fields = {"final_return": self.last, "best_return": self.best, "final_return_quant": self.last_quant,
                  "eval_history": list(self.history), "eval_history_quant": list(self.history_quant),
                  "eval_quant_s": round(self.quant_seconds, 3), "stop_at_return": self.stop_at_return,
                  "stopped_at_frames": self.stopped_at_frames}
        if not self.history:
            fields["final_return_reason"] = "the run stopped before its first evaluation"
        return fields

    def should_update(self, frames: int) -> bool:
        return self.schedule.due(frames)

    @override
    def on_fit_start(self, trainer: L.Trainer, pl_module) -> None:
        if not self.deterministic and not pl_module.stochastic:
            raise ConfigError(f"eval.deterministic=false samples actions from a stochastic policy; "
                              f"{type(pl_module).__name__}'s policy is deterministic: set eval.deterministic=true")

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.sanity_checking or not self.should_update(pl_module.frames):
            return
        self.schedule.skip_past(pl_module.frames)
        mean = self.evaluate(trainer, pl_module)
        if self.stop_at_return is not None and mean >= self.stop_at_return:
            self.stop(trainer, pl_module.frames, mean)

    def stop(self, trainer: L.Trainer, frames: int, mean: float) -> None:
        """Ends the run after this batch, as its frame budget would (the actors stop, the last
        checkpoint and the summary are written)."""
        self.stopped_at_frames = frames
        trainer.should_stop = True
        logger.info("eval return %.1f >= eval.stop_at_return=%g: the run stops at %d frames", mean,
                    self.stop_at_return, frames)

    @override
    def on_train_end(self, trainer: L.Trainer, pl_module) -> None:
        if not self.history or self.history[-1][0] != pl_module.frames:
            self.evaluate(trainer, pl_module)

    def evaluate(self, trainer: L.Trainer, pl_module, log: bool = True) -> float:
        """Runs the episodes now (fp32, then the actors' policy if it is not fp32) and records
        the means."""
        experience = trainer.datamodule
        seed = experience.spec.seed + self.seed_offset + len(self.history)
        if self._env is None:
            self._env = experience.make_eval_env(self.episodes, seed)
        self._env.set_seed(seed)
        act = pl_module.act if self.deterministic else sampled(pl_module.behaviour_network, pl_module.device)
        returns = rollout_return(self._env, act, self.episodes, self.max_steps)
        mean = statistics.fmean(returns)
        self.history.append((pl_module.frames, mean))
        metrics = {"eval/return_mean": mean, "eval/return_std": statistics.pstdev(returns)}
        if not experience.quant.is_full_precision:
            started = time.perf_counter()
            network = experience.actor_policy.network
            act = greedy(network, pl_module.spec.discrete) if self.deterministic else sampled(network)
            self._env.set_seed(seed)  # the fp32 policy's episodes again
            mean_quant = statistics.fmean(rollout_return(self._env, act, self.episodes, self.max_steps))
            self.history_quant.append((pl_module.frames, mean_quant))
            self.quant_seconds += time.perf_counter() - started
            metrics["eval/return_mean_quant"] = mean_quant
            metrics["time/eval_quant_s"] = self.quant_seconds
        logger.info("eval @ %d frames: return %.1f ± %.1f%s", pl_module.frames, mean, metrics["eval/return_std"],
                    f" ({experience.quant.describe().split()[0]}: {metrics['eval/return_mean_quant']:.1f})"
                    if "eval/return_mean_quant" in metrics else "")
        # Straight to the logger, at this evaluation's frame: through pl_module.log_dict the
        # value would be written again at every later step that holds no evaluation.
        if log and trainer.logger is not None:
            trainer.logger.log_metrics(metrics, step=pl_module.frames)
        return mean

    @override
    def state_dict(self) -> dict:
        return {"next_frames": self.schedule.next_at, "history": list(self.history),
                "history_quant": list(self.history_quant), "quant_seconds": self.quant_seconds}

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        self.schedule.next_at = state_dict["next_frames"]
        self.history = [tuple(item) for item in state_dict["history"]]
        self.history_quant = [tuple(item) for item in state_dict.get("history_quant", [])]
        self.quant_seconds = state_dict.get("quant_seconds", 0.0)


def sampled(network, device=None):
    """``obs -> action`` drawn from a stochastic policy network's distribution."""

    def act(observation):
        with torch.no_grad():
            return network.sample(observation if device is None else observation.to(device)).cpu()

    return act


def greedy(network, discrete: bool):
    """``obs -> action`` of a policy network without exploration (argmax for Q-values)."""

    def act(observation):
        out = network(observation)
        return out.argmax(-1) if discrete else out

    return act
