"""Parallel learners (``trainer.devices=2``): a real two-rank Lightning DDP run on the CPU
(gloo), started from the command line as a user would, so that Lightning starts rank 1 by
running the command again.

One run, several assertions: both ranks make every update, their weights end identical,
the TD errors of both ranks' shares reach the prioritized replay, periodic checkpoints are
written (Lightning's collective checkpoint path), and only rank 0 writes outputs (rank 1
writes its log, beside rank 0's in Hydra's folder).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import torch
from tensordict import TensorDict

from actorq.data.learner_ranks import pack, split, unpack
from actorq.algos.batches import Sample
from tests.helpers import scalars, still_running

RUN = ("+experiment=td3_pendulum", "trainer.devices=2", "replay.prioritized=true", "quant.bits=8",
       "actors.total_frames=1200", "actors.frames_per_batch=200", "actors.init_random_frames=200",
       "algo.learning_starts=400", "algo.batch_size=32", "algo.actor_hidden=[16]", "algo.critic_hidden=[16]",
       "eval.every_frames=600", "eval.episodes=1", "checkpoint.every_frames=600", "~callbacks.carbon",
       "trainer.enable_progress_bar=false")


def test_two_learner_ranks_stay_identical_and_only_rank_zero_writes(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "actorq", *RUN, f"run_dir={run_dir}"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children: dict[int, tuple[psutil.Process, str]] = {}  # rank 1 and the actor processes
    deadline = time.monotonic() + 300  # a collective the ranks do not both reach hangs: fail instead
    stdout = stderr = None
    try:
        while stdout is None and time.monotonic() < deadline:
            record_children(process, children)
            try:  # also what reads the output of a run that has just ended
                stdout, stderr = process.communicate(timeout=1)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if stdout is None:  # past the deadline, or the test itself broke: leave nothing running
            for child, _ in children.values():
                if child.is_running():
                    child.kill()
            process.kill()
            stdout, stderr = process.communicate()
    assert process.returncode == 0, stderr[-3000:]
    rank_one = [command for _, command in children.values() if "hydra.job.name=train_ddp_process_1" in command]
    assert len(rank_one) == 1 and "-m actorq" in rank_one[0]

    summary = json.loads((run_dir / "summary.json").read_text())
    learners = summary["learners"]
    assert summary["status"] == "completed" and summary["frames"] == 1200
    assert learners["ranks"] == 2
    assert learners["learner_steps"] == [summary["learner_steps"]] * 2 and summary["learner_steps"] >= 800
    assert learners["max_weight_difference"] == 0.0  # averaged gradients: the same step on both ranks
    assert stdout.count("Final eval return") == 1  # rank 1 reports nothing

    written = sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*") if path.is_file())
    hydra = [name for name in written if name.startswith(".hydra/") or name.endswith(".log")]
    assert hydra == [".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "__main__.log",
                     "train_ddp_process_1.log"]  # Hydra's own output: its config, one log per rank
    events = [name for name in written if name.startswith("tb/events.out.tfevents")]
    assert len(events) == 1, written
    assert set(written) - set(events) - set(hydra) == {
        "config.yaml", "plan.json", "summary.json", "tb/hparams.yaml", "checkpoints/frames=600.ckpt",
        "checkpoints/frames=1200.ckpt", "checkpoints/last.ckpt"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run"]  # nothing outside the run dir
    curves = scalars(run_dir / "tb", lambda name: name.startswith("events"))
    assert curves["train/loss_value"] and len(curves["eval/return_mean"]) == 2
    assert not still_running(process for process, _ in children.values())


def record_children(process: subprocess.Popen, children: dict[int, tuple[psutil.Process, str]]) -> None:
    """Adds the run's descendants not seen before, with their command lines."""
    try:
        descendants = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:  # the run has just ended
        return
    for child in descendants:
        if child.pid not in children:
            try:
                children[child.pid] = (child, " ".join(child.cmdline()))
            except psutil.NoSuchProcess:
                pass


def test_a_sample_crosses_to_the_ranks_as_flat_bytes_and_comes_back_whole():
    size = 8
    batch = TensorDict({"observation": torch.randn(size, 3), "action": torch.randint(2, (size,)),
                        "terminated": torch.rand(size) > 0.5, "next": {"observation": torch.randn(size, 3)}},
                       batch_size=[size])
    sample = Sample(batch, torch.arange(10, 10 + size), torch.rand(size))
    shares = split(sample, 2)
    assert [share.indices.tolist() for share in shares] == [[10, 11, 12, 13], [14, 15, 16, 17]]
    for share in shares:
        layout, buffer = pack(share, prioritized=True)
        assert buffer.dtype == torch.uint8 and buffer.numel() == layout.nbytes
        back = unpack(layout, buffer)
        assert torch.equal(back.indices, share.indices) and torch.equal(back.weights, share.weights)
        assert (back.batch == share.batch).all() and back.batch["terminated"].dtype == torch.bool
