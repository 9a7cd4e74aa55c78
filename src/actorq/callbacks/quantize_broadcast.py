"""QuantizeBroadcast: the learner's fp32 policy -> post-training quantization -> the actors.

Every ``every_n_steps`` learner steps the callback quantizes the learner's behaviour network
(:func:`actorq.quant.quantize`, calibrated on a replay sample when the observer is learned),
loads the payload into the main process's copy of the actors' policy, and pushes it through
:meth:`actorq.actors.pool.ActorPool.push`. With ``bits=32`` the fp32 weights go as they are.

Example:
    >>> broadcast = QuantizeBroadcast(bits=8, mode="static", every_n_steps=100)
    >>> broadcast.quant.describe()
    'int8 static per_channel'
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from typing_extensions import override

from actorq.actors.policy import ExplorationPolicy
from actorq.quant import QuantizedNetwork, QuantSpec, fidelity_metrics, fp32_nbytes, payload_nbytes, quantize
from actorq.quant import resolve_precision

if TYPE_CHECKING:
    from actorq.algos.base import OffPolicyLearner

log = logging.getLogger(__name__)


class QuantizeBroadcast(Callback):
    """Pushes the learner's policy, at the configured precision, to every actor.

    Logs ``quant/broadcast_ms``, ``quant/broadcast_bytes``, ``quant/broadcasts`` and, for
    quantized actors, the fidelity metrics of :func:`actorq.quant.fidelity_metrics`
    (``quant/action_error``, ``quant/weight_error``, ...) on a replay sample.

    Args:
        bits: 32, 16, 8, 2..7 or ``"auto"`` (see :class:`~actorq.quant.QuantSpec`).
        mode: ``"static"`` or ``"dynamic"``.
        observer: ``"learned"`` or ``"fixed"``.
        calibration: ``"minmax"``, ``"moving_average"`` or ``"histogram"``.
        granularity: ``"per_channel"`` or ``"per_tensor"``.
        input_range: observation range for the fixed observer.
        activation_max: activation bound for the fixed observer.
        calibration_samples: replay observations per calibration.
        auto_tolerance: largest action error ``bits="auto"`` accepts.
        every_n_steps: learner steps between pushes.
        warmup_steps: learner steps before the first scheduled push.

    Attributes:
        quant: the precision in force (``bits="auto"`` is resolved by :meth:`prepare`).
        choice: what ``bits="auto"`` measured and picked (``None`` otherwise).
        actor_policy: the main process's copy of what the actors run (quantized runs only).
    """

    def __init__(
        self,
        bits: int | str = 32,
        mode: str = "static",
        observer: str = "learned",
        calibration: str = "minmax",
        granularity: str = "per_channel",
        input_range: Sequence[float] = (-10.0, 10.0),
        activation_max: float = 20.0,
        calibration_samples: int = 512,
        auto_tolerance: float = 0.05,
        every_n_steps: int = 100,
        warmup_steps: int = 0,
    ):
        if every_n_steps <= 0:
            raise ValueError(f"quant.every_n_steps must be positive, got {every_n_steps}")
        if warmup_steps < 0:
            raise ValueError(f"quant.warmup_steps must be >= 0, got {warmup_steps}")
        self.quant = QuantSpec(
            bits=bits, mode=mode, observer=observer, calibration=calibration, granularity=granularity,
            input_range=tuple(input_range), activation_max=activation_max,
            calibration_samples=calibration_samples, auto_tolerance=auto_tolerance,
        )
        self.every_n_steps = every_n_steps
        self.warmup_steps = warmup_steps
        self.last_step = 0
        self.broadcasts = 0
        self.choice = None
        self.actor_policy: ExplorationPolicy | None = None

    @property
    def quantized(self) -> bool:
        return self.quant.bits != 32

    def prepare(self, learner: OffPolicyLearner, batch_size: int, observations: torch.Tensor) -> nn.Module:
        """Resolves ``bits="auto"`` and returns the policy the actors start with.

        Args:
            learner: the :class:`~actorq.algos.base.OffPolicyLearner`.
            batch_size: observations per actor forward (``actors.envs_per_worker``).
            observations: representative observations (a few random env steps) used for
                ``auto``'s timing and fidelity, and to calibrate the first payload.
        """
        network = learner.behaviour_network
        self.quant, self.choice = resolve_precision(
            network, self.quant, batch_size, observations, discrete=learner.spec.discrete
        )
        if self.choice is not None:
            log.info("quant.bits=auto picked %s: %s", self.quant.describe(), self.choice.metrics())
        if not self.quantized:
            return learner.policy
        self.actor_policy = learner.policy
        self.actor_policy.network = QuantizedNetwork.template_for(network, self.quant)
        self.actor_policy.network.load_payload(quantize(network, self.quant, observations))
        return self.actor_policy

    def should_update(self, learner_steps: int) -> bool:
        if learner_steps < max(self.warmup_steps, 1):
            return False
        return learner_steps - self.last_step >= self.every_n_steps

    @override
    def on_train_start(self, trainer: L.Trainer, pl_module) -> None:
        if self.choice is not None and trainer.logger is not None:
            trainer.logger.log_metrics(self.choice.metrics(), step=0)

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.sanity_checking or not self.should_update(pl_module.learner_steps):
            return
        self.broadcast(pl_module)

    def broadcast(self, learner: OffPolicyLearner) -> dict[str, float]:
        """Quantizes (if configured) and pushes now; returns the logged metrics."""
        started = time.perf_counter()
        network = on_cpu(learner.behaviour_network)
        if self.quantized:
            observations = learner.replay.sample(self.quant.calibration_samples).batch["observation"]
            payload = quantize(network, self.quant, observations)
            self.actor_policy.network.load_payload(payload)
            self.actor_policy.noise_scale.copy_(learner.policy.noise_scale)
            learner.actors.push(self.actor_policy)
            nbytes = payload_nbytes(payload)
        else:
            learner.actors.push(learner.policy)
            nbytes = fp32_nbytes(network)
            observations = None
        self.last_step = learner.learner_steps
        self.broadcasts += 1
        metrics = {
            "quant/broadcast_ms": 1000 * (time.perf_counter() - started),
            "quant/broadcast_bytes": float(nbytes),
            "quant/broadcasts": float(self.broadcasts),
        }
        if self.quantized:
            metrics.update(fidelity_metrics(network, self.actor_policy.network, observations, learner.spec.discrete))
        learner.log_dict(metrics, on_step=True, on_epoch=False, batch_size=1)
        return metrics

    @override
    def state_dict(self) -> dict:
        state = {"last_step": self.last_step, "broadcasts": self.broadcasts, "quant": dataclasses.asdict(self.quant)}
        if self.actor_policy is not None:
            state["payload"] = {k: v.clone() for k, v in self.actor_policy.network.payload().items()}
        return state

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        self.last_step = state_dict["last_step"]
        self.broadcasts = state_dict["broadcasts"]
        self.quant = QuantSpec(**state_dict["quant"])


def on_cpu(network: nn.Module) -> nn.Module:
    """The network itself on CPU, or a CPU copy of a GPU learner's (torch.ao runs on CPU)."""
    if next(network.parameters()).device.type == "cpu":
        return network
    return copy.deepcopy(network).cpu()
