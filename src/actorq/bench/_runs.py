"""What the benchmarks read back from a real run's TensorBoard events."""

from __future__ import annotations

from pathlib import Path


def steady_frames_per_s(tb: Path) -> float:
    """Slope of ``collect/frames`` over wall-clock, from a third of the run to its end
    (start-up and the random-action warm-up left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    events.Reload()
    points = events.Scalars("collect/frames")
    first, last = points[len(points) // 3], points[-1]
    if last.wall_time <= first.wall_time:
        raise RuntimeError(f"too few collect/frames points in {tb} to measure a rate")
    return (last.value - first.value) / (last.wall_time - first.wall_time)
