"""QuantizeBroadcast: on a schedule, the learner's fp32 policy -> the actors' precision -> the actors.

Every ``every_n_steps`` learner steps the callback encodes the learner's behaviour network at
the actors' precision (``trainer.datamodule.quant``; fp32 too, so fp32 and int8 actors see
weights on the same schedule) and hands the payload to the experience pipeline
(``trainer.datamodule.push``), which loads it into the main process's copy of the actors'
policy, sets its exploration scale where the run stands and pushes it to every worker.
Static int8 calibrates on observations drawn uniformly from the replay
(``trainer.datamodule.calibration_observations``), without touching the learner's sampling
state.

Example:
    >>> broadcast = QuantizeBroadcast(every_n_steps=100, warmup_steps=50)
    >>> broadcast.should_update(40), broadcast.should_update(100)
    (False, True)
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING

import lightning as L
from lightning.pytorch.callbacks import Callback
from torch import nn
from typing_extensions import override

from actorq.callbacks.schedule import Every
from actorq.finite import check_finite_weights
from actorq.quant import fidelity_metrics, payload_nbytes, quantize

if TYPE_CHECKING:
    from actorq.algos.base import OffPolicyLearner
    from actorq.experience import Experience


class QuantizeBroadcast(Callback):
    """Pushes the learner's policy, at the actors' precision, to every actor on a schedule.

    Logs ``quant/broadcast_ms``, ``quant/broadcast_bytes`` (the payload that crosses to each
    worker), ``quant/broadcasts`` and the fidelity metrics of
    :func:`actorq.quant.fidelity_metrics` (``quant/action_error``, ``quant/weight_error``, ...)
    on a replay sample.

    Args:
        every_n_steps: learner steps between pushes.
        warmup_steps: learner steps before the first scheduled push.
    """

    def __init__(self, every_n_steps: int = 100, warmup_steps: int = 0):
        if every_n_steps <= 0:
            raise ValueError(f"callbacks.broadcast.every_n_steps must be positive, got {every_n_steps}")
        if warmup_steps < 0:
            raise ValueError(f"callbacks.broadcast.warmup_steps must be >= 0, got {warmup_steps}")
        self.every_n_steps = every_n_steps
        self.warmup_steps = warmup_steps
        self.schedule = Every(every_n_steps)
        self.last_step = 0
        self.broadcasts = 0

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
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.sanity_checking or not self.should_update(pl_module.learner_steps):
            return
        self.broadcast(trainer.datamodule, pl_module)

    def broadcast(self, experience: Experience, learner: OffPolicyLearner) -> dict[str, float]:
        """Encodes the learner's policy at the actors' precision and pushes it now; returns
        the logged metrics."""
        started = time.perf_counter()
        network = on_cpu(learner.behaviour_network)
        check_finite_weights(network, "the policy", learner.learner_steps)
        quant = experience.quant
        observations = experience.calibration_observations(quant.calibration_samples)
        payload = quantize(network, quant, observations)
        actor_network = experience.push(payload)
        self.last_step = learner.learner_steps
        self.broadcasts += 1
        metrics = {
            "quant/broadcast_ms": 1000 * (time.perf_counter() - started),
            "quant/broadcast_bytes": float(payload_nbytes(payload)),
            "quant/broadcasts": float(self.broadcasts),
            **fidelity_metrics(network, actor_network, observations, learner.spec.discrete),
        }
        if learner.logger is not None:  # once per push, at the push's frame count
            learner.logger.log_metrics(metrics, step=learner.frames)
        return metrics

    @override
    def state_dict(self) -> dict:
        return {"last_step": self.last_step, "broadcasts": self.broadcasts}

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        self.last_step = state_dict["last_step"]
        self.broadcasts = state_dict["broadcasts"]


def on_cpu(network: nn.Module) -> nn.Module:
    """The network itself on CPU, or a CPU copy of a GPU learner's (torch.ao runs on CPU)."""
    if next(network.parameters()).device.type == "cpu":
        return network
    return copy.deepcopy(network).cpu()
