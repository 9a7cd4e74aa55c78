"""The console of a run: a progress bar in env frames, and log lines written above it.

``FrameProgressBar`` is Lightning's tqdm bar counting env frames instead of batches, with the
frame rate the learner logs (``collect/frames_per_s``) and the last evaluation's return in
its postfix::

    Training:  40%|████      | 8000/20000 frames [00:21<00:32, frames/s=372, return=-812.4 (int8 -815.0)]

``train()`` adds it to the Trainer's callbacks when ``trainer.enable_progress_bar`` is true;
:class:`actorq.run.console.ConsoleHandler` writes log lines above it.

Example:
    >>> bar = FrameProgressBar()
    >>> bar.postfix({"frames/s": 372, "return": "-812.4 (int8 -815.0)"})
    'frames/s=372, return=-812.4 (int8 -815.0)'
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from typing_extensions import override

from actorq.callbacks.evaluation import Evaluation


class FrameProgressBar(TQDMProgressBar):
    """Lightning's ``TQDMProgressBar`` over the run's env frames (``actors.total_frames``):
    the bar's count is the learner's ``frames``, its postfix the frames per second (the
    learner's ``collect/frames_per_s``: since the first batch of this fit) and the return of
    the last evaluation (the actors' quantized policy's in brackets). A run without a frame
    budget (a data module without ``total_frames``) keeps Lightning's count of batches."""

    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} frames [{elapsed}<{remaining}{postfix}]"

    def __init__(self, refresh_rate: int = 1, process_position: int = 0):
        super().__init__(refresh_rate=refresh_rate, process_position=process_position, leave=False)
        self._in_frames = False

    @override
    def on_train_start(self, trainer: L.Trainer, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        # A run resumed mid-epoch (any resumed run) gets no on_train_epoch_start from Lightning.
        self._count_frames(trainer)

    @override
    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if not self._count_frames(trainer):
            self.train_progress_bar.bar_format = TQDMProgressBar.BAR_FORMAT
            super().on_train_epoch_start(trainer, *args)

    def _count_frames(self, trainer: L.Trainer) -> bool:
        """Sets the bar to count the run's env frames, from those done (a resumed run starts
        where it stopped; tqdm's rate counts from ``initial``); ``False`` for a data module
        without a frame budget."""
        total = getattr(trainer.datamodule, "total_frames", None)
        self._in_frames = total is not None
        bar = self.train_progress_bar
        if self._in_frames and bar is not None:
            bar.reset(total=int(total))
            bar.initial = bar.n = bar.last_print_n = trainer.lightning_module.frames
            bar.set_description("Training")
        return self._in_frames

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch: Any, batch_idx: int) -> None:
        if not self._in_frames:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        bar = self.train_progress_bar
        if bar is None or bar.disable or not self._should_update(batch_idx + 1, -1):
            return
        bar.n = min(pl_module.frames, bar.total)
        bar.set_postfix_str(self.postfix(self.get_metrics(trainer, pl_module)), refresh=False)
        bar.refresh()

    @override
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module) -> None:
        if not self._in_frames:
            super().on_train_epoch_end(trainer, pl_module)
            return
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix_str(self.postfix(self.get_metrics(trainer, pl_module)))

    @override
    def get_metrics(self, trainer: L.Trainer, pl_module) -> dict[str, Any]:
        """``{"frames/s": int, "return": "R (int8 Q)"}`` for the postfix (what is known yet),
        then anything logged with ``prog_bar=True``; no logger version."""
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        shown: dict[str, Any] = {}
        rate = trainer.callback_metrics.get("collect/frames_per_s")
        if rate is not None:
            shown["frames/s"] = round(float(rate))
        evaluation = next((c for c in trainer.callbacks if isinstance(c, Evaluation)), None)
        if evaluation is not None and evaluation.last is not None:
            text = f"{evaluation.last:.1f}"
            if evaluation.last_quant is not None:
                text += f" ({_short_precision(trainer)} {evaluation.last_quant:.1f})"
            shown["return"] = text
        return {**shown, **items}

    @staticmethod
    def postfix(metrics: dict[str, Any]) -> str:
        return ", ".join(f"{name}={value}" for name, value in metrics.items())


def _short_precision(trainer: L.Trainer) -> str:
    quant = getattr(trainer.datamodule, "quant", None)
    return quant.describe().split()[0] if quant is not None else "actors"
