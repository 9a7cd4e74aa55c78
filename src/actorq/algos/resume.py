"""The learner's side of resuming a run: its random states and its progress in the checkpoint
Lightning saves (:meth:`actorq.algos.base.Learner.on_save_checkpoint` and
``on_load_checkpoint``); the run's side, which checkpoint and whether it fits, is
:mod:`actorq.run.resume`."""

from __future__ import annotations

import random

import numpy as np
import torch


def extend_to_budget(checkpoint: dict, total_frames: int, planned_updates: int) -> None:
    """Lets a resumed run continue to this run's frame budget, in ``checkpoint`` (the dict
    Lightning restores from, before it restores the loops and schedulers).

    A run that finished its budget saved a finished epoch (``max_epochs=1``): with a larger
    ``actors.total_frames`` the epoch is reopened, as if the run had been stopped mid-way, so
    the actors collect the frames left. Every linear learning-rate decay is planned over the
    new budget's ``planned_updates`` (the rate continues from where that plan is now).

    Example:
        >>> progress = {"ready": 1, "started": 1, "processed": 1, "completed": 0}
        >>> batches = {"is_last_batch": True}
        >>> loops = {"epoch_progress": {"total": dict(progress), "current": progress},
        ...          "epoch_loop.batch_progress": batches}
        >>> decay = {"updates": 500, "final_fraction": 0.0}  # a LinearDecay's saved state
        >>> checkpoint = {"actorq": {"frames": 2048}, "lr_schedulers": ({"lr_lambdas": (decay,)},),
        ...               "loops": {"fit_loop": loops}}
        >>> extend_to_budget(checkpoint, total_frames=3000, planned_updates=900)
        >>> progress.get("processed"), batches.get("is_last_batch"), decay.get("updates")
        (0, False, 900)
        >>> closing = {"ready": 1, "started": 1, "processed": 0, "completed": 0}  # saved at its last batch
        >>> batches = {"is_last_batch": True}
        >>> checkpoint["loops"]["fit_loop"] = {"epoch_progress": {"total": dict(closing), "current": closing},
        ...                                    "epoch_loop.batch_progress": batches}
        >>> extend_to_budget(checkpoint, total_frames=3000, planned_updates=900)
        >>> batches.get("is_last_batch")
        False
    """
    for scheduler in checkpoint.get("lr_schedulers", []):
        for decay in scheduler.get("lr_lambdas") or []:
            if isinstance(decay, dict) and "updates" in decay:  # a LinearDecay's state
                decay["updates"] = max(1, int(planned_updates))
    fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
    epoch = fit_loop.get("epoch_progress", {})
    batches = fit_loop.get("epoch_loop.batch_progress", {})
    # Finished: the epoch was closed, or its last batch was processed and the final save was
    # skipped because a periodic checkpoint of the same frame count had just been written.
    finished = epoch.get("current", {}).get("processed", 0) >= 1 or batches.get("is_last_batch", False)
    if finished and checkpoint.get("actorq", {}).get("frames", 0) < total_frames:
        for progress in (epoch.get("total", {}), epoch.get("current", {})):
            progress["processed"] = progress["completed"] = 0
        batches["is_last_batch"] = False


def rng_states() -> dict:
    """The learner process's random states (torch, numpy's global generator, Python's
    ``random``) in a form ``weights_only`` loading accepts."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)}}


def set_rng_states(states: dict) -> None:
    """Restores what :func:`rng_states` saved."""
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    numpy = states["numpy"]
    np.random.set_state((numpy["kind"], numpy["keys"].numpy().astype(np.uint32), numpy["position"],
                         numpy["has_gauss"], numpy["gauss"]))
