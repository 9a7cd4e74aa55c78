"""FrameCheckpoint: Lightning's ``ModelCheckpoint`` on a schedule of env frames.

Every ``every_frames`` env frames (the learner's ``frames``, the x-axis of every curve) it
writes ``frames=N.ckpt`` and ``last.ckpt``; only the ``keep_last`` newest ``frames=N.ckpt``
stay (``ModelCheckpoint``'s top-k over ``collect/frames``). At the end of the run, and on
SIGTERM, Ctrl-C or an error, it writes ``last.ckpt``. A checkpoint holds what a resumed run
needs (``actorq train ... ckpt_path=last``): see ``docs/fault-tolerance.md``.

Example:
    >>> checkpoint = FrameCheckpoint(dirpath="run/checkpoints", every_frames=1000, keep_last=2)
    >>> checkpoint.should_update(999), checkpoint.should_update(1000)
    (False, True)
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from actorq.callbacks.schedule import Every

FRAMES = "collect/frames"  # logged by the learner at every batch


class FrameCheckpoint(ModelCheckpoint):
    """Checkpoints every ``every_frames`` env frames, keeping the last ``keep_last``.

    Args:
        dirpath: the folder of the checkpoints (the run dir's ``checkpoints/``).
        every_frames: env frames between periodic checkpoints; ``None`` writes only
            ``last.ckpt`` (at the end and on interruption).
        keep_last: periodic checkpoints kept (the newest); ``-1`` keeps all.
    """

    def __init__(self, dirpath: str, every_frames: int | None = None, keep_last: int = 3):
        if every_frames is not None and (not isinstance(every_frames, int) or every_frames <= 0):
            raise ValueError(f"checkpoint.every_frames must be a positive integer or null, got {every_frames!r}")
        if not isinstance(keep_last, int) or (keep_last < 1 and keep_last != -1):
            raise ValueError(f"checkpoint.keep_last must be a positive integer or -1 (all), got {keep_last!r}")
        periodic = every_frames is not None
        super().__init__(dirpath=dirpath, filename=f"frames={{{FRAMES}:.0f}}", auto_insert_metric_name=False,
                         monitor=FRAMES if periodic else None, mode="max",
                         save_top_k=keep_last if periodic else 0, save_last=True, save_on_exception=True)
        self.every_frames = every_frames
        self.schedule = Every(every_frames)
        self._last_frames_saved = -1

    def should_update(self, frames: int) -> bool:
        return self.schedule.due(frames)

    @override
    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._should_skip_saving_checkpoint(trainer) or not self.should_update(pl_module.frames):
            return
        self.schedule.skip_past(pl_module.frames)
        candidates = self._monitor_candidates(trainer)
        self._save_topk_checkpoint(trainer, candidates)
        self._save_last_checkpoint(trainer, candidates)

    @override
    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        # last.ckpt only: an interruption is not a periodic checkpoint
        if self.save_on_exception and not self._should_skip_saving_checkpoint(trainer) \
                and every_rank_stopped_here(trainer, exception):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    @override
    def _should_skip_saving_checkpoint(self, trainer: L.Trainer) -> bool:
        # Lightning's rule compares optimizer steps, which stand still while frames arrive
        # (before learning starts, or with few updates per frame); this one compares frames.
        return (bool(trainer.fast_dev_run) or trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking
                or self._last_frames_saved == trainer.lightning_module.frames)

    @override
    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        self._last_frames_saved = trainer.lightning_module.frames

    @override
    def state_dict(self) -> dict:
        return {**super().state_dict(), "next_frames": self.schedule.next_at}

    @override
    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.schedule.next_at = state_dict.get("next_frames", self.schedule.next_at)


def every_rank_stopped_here(trainer: L.Trainer, exception: BaseException) -> bool:
    """Whether every learner rank met ``exception`` at the same batch, so that all of them can
    take part in Lightning's collective checkpoint. Always with one rank; with several
    (``trainer.devices > 1``) only for SIGTERM, which Lightning hands to every rank at the same
    batch. A failure or Ctrl-C meets the ranks wherever they are: a collective then could hang,
    so the run keeps its periodic checkpoints instead."""
    return trainer.world_size == 1 or isinstance(exception, SIGTERMException)
