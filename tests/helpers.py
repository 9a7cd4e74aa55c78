"""Test helpers: a learner attached to a real Lightning Trainer without fitting."""

from __future__ import annotations

import lightning as L


def attach_trainer(learner: L.LightningModule) -> L.Trainer:
    """Gives ``learner`` a real Trainer and optimizers, so ``update`` can run outside ``fit``."""
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    learner.trainer = trainer
    trainer.strategy.connect(learner)
    trainer.strategy._lightning_optimizers = []
    optimizers = learner.configure_optimizers()
    trainer.strategy.optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
    return trainer
