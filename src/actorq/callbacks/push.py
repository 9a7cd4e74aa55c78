"""PolicyPush: on a schedule, the learner's fp32 policy -> the actors' precision -> the actors.

The callback decides when: every ``every_n_steps`` learner steps it checks that the learner's
behaviour network is finite and hands it to the experience pipeline
(``trainer.datamodule.push``), which owns the rest: the actors' precision
(``trainer.datamodule.quant``; fp32 too, so fp32 and int8 actors see weights on the same
schedule), calibration (observations drawn uniformly from the replay without replacement
and without touching the learner's sampling state, or the last rollout's), encoding, and the
push to every worker as the next policy version. The fidelity metrics (the actors' copy
against the learner's policy, in the policy's own terms, on held-out recent observations: the
rollout before the last, or the rest of the replay's draw, none calibrated on) run the decoded
copy again, so they are measured on every ``fidelity_every_n_pushes``-th push only.

Example:
    >>> push = PolicyPush(every_n_steps=100, warmup_steps=50)
    >>> push.should_update(40), push.should_update(100)
    (False, True)
"""

from __future__ import annotations

import copy
import logging
import time
from typing import TYPE_CHECKING

import lightning as L
from lightning.pytorch.callbacks import Callback
from torch import nn
from typing_extensions import override

from actorq.callbacks.schedule import Every
from actorq.util.finite import check_finite_weights
from actorq.quant import fidelity_metrics

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from actorq.algos.base import Learner
    from actorq.experience import Experience


class PolicyPush(Callback):
    """Pushes the learner's policy, at the actors' precision, to every actor on a schedule.

    Logs ``quant/push_ms``, ``quant/push_bytes`` (the payload that crosses to each
    worker), ``quant/pushes``, ``quant/policy_version`` and, on the first push and every
    ``fidelity_every_n_pushes``-th after it, the fidelity metrics of
    :func:`actorq.quant.fidelity_metrics` (``quant/kl``, ``quant/action_error``, ...) on
    held-out recent observations. Where the divergence budget measured a push
    (``quant.max_kl``), ``quant/fallback`` (1 when it went out at a fallback precision) and
    ``quant/fallbacks`` (how many did); its ``quant/kl`` and ``quant/kl_max`` are then the
    budget's measurement of the copy at the actors' own precision, also where the push fell
    back (the fallback's copy, fp32 by default, would log a KL of 0).

    A resumed run whose checkpoint was written after a push was due and before it happened (an
    update interrupted by Ctrl-C or an error, whose learner's weights are newer than the
    actors' saved version) pushes once when training starts, before the actors' first batch
    is taken: a lock-step round then runs the learner's policy, as its math assumes.

    Args:
        every_n_steps: learner steps between pushes.
        warmup_steps: learner steps before the first scheduled push.
        fidelity_every_n_pushes: pushes between two measurements of the fidelity metrics.
    """

    def __init__(self, every_n_steps: int = 100, warmup_steps: int = 0, fidelity_every_n_pushes: int = 1):
        if every_n_steps <= 0:
            raise ValueError(f"callbacks.push.every_n_steps must be positive, got {every_n_steps}")
        if warmup_steps < 0:
            raise ValueError(f"callbacks.push.warmup_steps must be >= 0, got {warmup_steps}")
        if fidelity_every_n_pushes <= 0:
            raise ValueError("callbacks.push.fidelity_every_n_pushes must be positive, "
                             f"got {fidelity_every_n_pushes}")
        self.every_n_steps = every_n_steps
        self.warmup_steps = warmup_steps
        self.fidelity_every_n_pushes = fidelity_every_n_pushes
        self.schedule = Every(every_n_steps)
        self.last_step = 0
        self.pushes = 0
        self.fallbacks = 0
        self.fidelity = FidelityTotals()

    @property
    def last_step(self) -> int:
        """The learner step of the last push (0 before the first)."""
        return self._last_step

    @last_step.setter
    def last_step(self, step: int) -> None:
        self._last_step = step
        self.schedule.restart(step)  # the next push every_n_steps later, and not before the warmup
        self.schedule.next_at = max(self.schedule.next_at, self.warmup_steps, 1)

    def should_update(self, learner_steps: int) -> bool:
        return self.schedule.due(learner_steps)

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module) -> None:
        if trainer.sanity_checking or not self.should_update(pl_module.learner_steps):
            return
        log.info("the checkpoint's learner made updates after the actors' policy version %d was pushed: "
                 "pushing its policy before the actors' first batch", trainer.datamodule.policy_version)
        self.push(trainer.datamodule, pl_module)

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.sanity_checking or not self.should_update(pl_module.learner_steps):
            return
        self.push(trainer.datamodule, pl_module)

    def push(self, experience: Experience, learner: Learner) -> dict[str, float]:
        """Publishes the learner's policy to the actors now; returns the logged metrics."""
        started = time.perf_counter()
        network = on_cpu(learner.behaviour_network)
        check_finite_weights(network, "the policy", learner.learner_steps)
        recorded = {"quant/log_prob_error": experience.log_prob_error,  # what the version pushed last ran
                    "quant/output_error": experience.output_error}
        pushed = experience.push(network)
        self.last_step = learner.learner_steps
        self.pushes += 1
        metrics = {
            "quant/push_ms": 1000 * (time.perf_counter() - started),
            "quant/push_bytes": float(pushed.payload_bytes),
            "quant/pushes": float(self.pushes),
            "quant/policy_version": float(pushed.version),
        }
        if pushed.budget_kl is not None or pushed.rung:  # the divergence budget measured this push
            self.fallbacks += bool(pushed.rung)
            metrics["quant/fallback"] = float(bool(pushed.rung))
            metrics["quant/fallbacks"] = float(self.fallbacks)
            if pushed.rung and self.fallbacks == 1:
                log.info("push %d went out at %s: the %s copy's KL %.3g on held-out observations exceeds "
                         "quant.max_kl=%g (quant/fallbacks counts such pushes)", pushed.version,
                         pushed.actor_network.active_quant.describe(), experience.quant.describe(),
                         pushed.budget_kl, experience.quant.max_kl)
        metrics.update({name: value for name, value in recorded.items() if value is not None})
        if pushed.held_out is not None and (self.pushes - 1) % self.fidelity_every_n_pushes == 0:
            started = time.perf_counter()
            metrics.update(fidelity_metrics(network, pushed.actor_network, pushed.held_out, learner.spec,
                                            experience.actor_batch, pushed.budget_divergence))
            metrics["quant/fidelity_ms"] = 1000 * (time.perf_counter() - started)
        self.fidelity.add(metrics)
        if learner.logger is not None:  # once per push, at the push's frame count
            learner.logger.log_metrics(metrics, step=learner.frames)
        return metrics

    def summary_fields(self) -> dict:
        """``fidelity`` for summary.json: each measured fidelity metric's mean over the
        measured pushes, its worst push, and how many were measured."""
        return {"fidelity": self.fidelity.summary()}

    @override
    def state_dict(self) -> dict:
        return {"last_step": self.last_step, "pushes": self.pushes, "fallbacks": self.fallbacks,
                "fidelity": self.fidelity.totals}

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        self.last_step = state_dict["last_step"]
        self.pushes = state_dict.get("pushes", state_dict.get("broadcasts", 0))  # the count's earlier name
        self.fallbacks = state_dict.get("fallbacks", 0)
        self.fidelity = FidelityTotals(state_dict.get("fidelity", {}))


class FidelityTotals:
    """The fidelity metrics of a run's pushes, summed, with the worst push of each.

    Example:
        >>> totals = FidelityTotals()
        >>> totals.add({"quant/kl": 0.01}); totals.add({"quant/kl": 0.03, "quant/pushes": 2.0})
        >>> totals.summary()
        {'kl': {'pushes': 2, 'mean': 0.02, 'worst': 0.03}}
    """

    # metric -> whether a larger value is worse
    TRACKED = {"quant/kl": True, "quant/greedy_agreement": False, "quant/action_error": True,
               "quant/log_prob_error": True, "quant/output_error": True, "quant/fallback": True}

    def __init__(self, totals: dict | None = None):
        self.totals: dict[str, dict[str, float]] = dict(totals or {})

    def add(self, metrics: dict[str, float]) -> None:
        for name, larger_is_worse in self.TRACKED.items():
            if name not in metrics:
                continue
            value, total = metrics[name], self.totals.setdefault(name.split("/", 1)[1], {"pushes": 0, "sum": 0.0})
            worst = total.get("worst", value)
            total["worst"] = max(worst, value) if larger_is_worse else min(worst, value)
            total["pushes"] += 1
            total["sum"] += value

    def summary(self) -> dict[str, dict[str, float]] | None:
        if not self.totals:
            return None
        return {name: {"pushes": int(t["pushes"]), "mean": round(t["sum"] / t["pushes"], 12), "worst": t["worst"]}
                for name, t in self.totals.items()}


def on_cpu(network: nn.Module) -> nn.Module:
    """The network itself on CPU, or a CPU copy of a GPU learner's (torch.ao runs on CPU)."""
    if next(network.parameters()).device.type == "cpu":
        return network
    return copy.deepcopy(network).cpu()
