"""QuantizeBroadcast: the learner's policy reaches the actors on a schedule.

With ``bits=32`` the fp32 weights are pushed as they are.

Example:
    >>> broadcast = QuantizeBroadcast(every_n_steps=100)
"""

from __future__ import annotations

import time

import lightning as L
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


class QuantizeBroadcast(Callback):
    """Pushes the learner's policy to every actor every ``every_n_steps`` learner steps.

    Logs ``quant/broadcast_ms`` (push latency) and ``quant/broadcasts``.

    Args:
        every_n_steps: learner steps between pushes.
        warmup_steps: learner steps before the first push.
    """

    def __init__(self, every_n_steps: int = 100, warmup_steps: int = 0):
        if every_n_steps <= 0:
            raise ValueError(f"every_n_steps must be positive, got {every_n_steps}")
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.every_n_steps = every_n_steps
        self.warmup_steps = warmup_steps
        self.last_step = 0
        self.broadcasts = 0

    def should_update(self, learner_steps: int) -> bool:
        if learner_steps < max(self.warmup_steps, 1):
            return False
        return learner_steps - self.last_step >= self.every_n_steps

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.sanity_checking or not self.should_update(pl_module.learner_steps):
            return
        started = time.perf_counter()
        pl_module.actors.push(pl_module.policy)
        self.last_step = pl_module.learner_steps
        self.broadcasts += 1
        pl_module.log_dict(
            {"quant/broadcast_ms": 1000 * (time.perf_counter() - started), "quant/broadcasts": float(self.broadcasts)},
            on_step=True, on_epoch=False, batch_size=1,
        )

    @override
    def state_dict(self) -> dict:
        return {"last_step": self.last_step, "broadcasts": self.broadcasts}

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        self.last_step = state_dict["last_step"]
        self.broadcasts = state_dict["broadcasts"]
