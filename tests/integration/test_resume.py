"""Interrupt a real run (SIGTERM), resume it with ``ckpt_path=last``, and check that it
continues: counters, schedules, the replay's contents and priorities (prioritized replay,
``replay.checkpoint=true``; ``tests/unit/test_replay_checkpoint.py`` covers every buffer),
callback state and the TensorBoard curves. One interrupted run
and one resumed run serve every test of this module but the last, whose PPO run is finished
and then continued to a larger budget: the actors' first rollout after the resume runs the
policy version they ran before the stop (observation statistics included)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from tests.helpers import scalars

REPO = Path(__file__).resolve().parents[2]
TOTAL = 6000
BATCH = 100
OVERRIDES = ["+experiment=dqn_cartpole", "algo.hidden=[16]", f"actors.total_frames={TOTAL}",
             f"actors.frames_per_batch={BATCH}", "actors.init_random_frames=100", "algo.learning_starts=200",
             "algo.batch_size=32", "algo.final_lr_fraction=0.5", "eval.every_frames=500", "eval.episodes=1",
             "replay.prioritized=true", "replay.checkpoint=true", "callbacks.push.every_n_steps=100",
             "checkpoint.every_frames=400", "checkpoint.keep_last=2", "~callbacks.carbon",
             "trainer.enable_progress_bar=false"]


class ResumeProbe(Callback):
    """Saves what the resumed run restored, once restored and before any actor starts
    (``on_fit_start``), and the frames its actors were started for (``on_train_start``),
    to ``probe.pt`` in the run dir."""

    def __init__(self, path: str):
        self.path = path
        self.seen = {}

    def on_fit_start(self, trainer, pl_module) -> None:
        experience = trainer.datamodule
        self.seen = {"replay": experience.replay.state_dict(), "frames": pl_module.frames,
                     "learner_steps": pl_module.learner_steps, "actors_started": experience.actors is not None,
                     "payload": experience.actor_policy.network.payload()}

    def on_train_start(self, trainer, pl_module) -> None:
        self.seen["actors_total_frames"] = trainer.datamodule.actors.collector.total_frames
        torch.save(self.seen, self.path)


def run_actorq(run_dir: Path, *extra: str, interrupt: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "actorq", *OVERRIDES, f"run_dir={run_dir}", *extra]
    process = subprocess.Popen(command, cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    try:
        if interrupt:  # once learning runs and two periodic checkpoints are written
            deadline = time.monotonic() + 180
            while not (run_dir / "checkpoints" / "frames=800.ckpt").is_file() and time.monotonic() < deadline:
                time.sleep(0.1)
            process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """The interrupted run's checkpoint and TensorBoard scalars, then the resumed run's."""
    run_dir = tmp_path_factory.mktemp("resume")
    first = run_actorq(run_dir, interrupt=True)
    assert first.returncode == 143, first.stderr[-2000:]
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    tb_before = {path.name for path in (run_dir / "tb").iterdir()}
    second = run_actorq(run_dir, "ckpt_path=last", f"+callbacks.probe._target_={__name__}.ResumeProbe",
                        f"+callbacks.probe.path={run_dir}/probe.pt")
    assert second.returncode == 0, second.stderr[-3000:]
    return {"run_dir": run_dir, "saved": saved, "stderr": second.stderr, "probe": torch.load(run_dir / "probe.pt", weights_only=True),
            "final": torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True),
            "summary": json.loads((run_dir / "summary.json").read_text()),
            "before": scalars(run_dir / "tb", lambda name: name in tb_before),
            "after": scalars(run_dir / "tb", lambda name: name not in tb_before)}


def test_the_interrupted_run_stopped_midway_with_a_checkpoint(resumed):
    frames = resumed["saved"]["actorq"]["frames"]
    assert 0 < frames < TOTAL and frames % BATCH == 0


def test_the_resumed_run_restores_counters_before_any_actor_starts(resumed):
    saved, probe = resumed["saved"], resumed["probe"]
    assert probe["frames"] == saved["actorq"]["frames"]
    assert probe["learner_steps"] == saved["actorq"]["learner_steps"]
    assert not probe["actors_started"]
    assert probe["actors_total_frames"] == TOTAL - saved["actorq"]["frames"]  # only the frames left
    payload = saved["Experience"]["payload"]
    assert payload.keys() == probe["payload"].keys()
    assert all(torch.equal(payload[name], probe["payload"][name]) for name in payload)


def test_the_resumed_replay_equals_the_saved_one(resumed):
    saved, restored = resumed["saved"]["Experience"]["replay"], resumed["probe"]["replay"]
    assert saved["contents"]["size"] == resumed["saved"]["actorq"]["frames"]
    for key in ("cursor", "size"):
        assert saved["contents"][key] == restored["contents"][key], key
    assert torch.equal(saved["contents"]["priorities"], restored["contents"]["priorities"])
    assert len(saved["contents"]["priorities"].unique()) > 2  # fed back by the learner, not all at max
    for key, rows in saved["contents"]["rows"].items():
        assert torch.equal(rows, restored["contents"]["rows"][key]), key
    assert (saved["steps"], saved["max_priority"], saved["rng"]) == (restored["steps"], restored["max_priority"],
                                                                    restored["rng"])


def test_the_resumed_run_collects_only_the_frames_left_and_its_schedules_continue(resumed):
    saved, final, summary = resumed["saved"], resumed["final"], resumed["summary"]
    assert summary["status"] == "completed" and summary["frames"] == TOTAL == final["actorq"]["frames"]
    assert final["actorq"]["learner_steps"] > saved["actorq"]["learner_steps"]
    # the learning-rate schedule counts every learner step of both runs
    assert final["lr_schedulers"][0]["last_epoch"] == final["actorq"]["learner_steps"]
    # callback state: the evaluation history and the push count go on
    frames = saved["actorq"]["frames"]
    before = [tuple(item) for item in saved["callbacks"]["Evaluation"]["history"]]
    assert [tuple(item) for item in summary["eval_history"][: len(before)]] == before
    assert summary["eval_history"][len(before)][0] == (frames // 500 + 1) * 500  # eval.every_frames=500 goes on
    assert summary["eval_history"][-1][0] == TOTAL and len(summary["eval_history"]) > len(before)
    assert resumed["after"]["quant/pushes"][0][1] == saved["callbacks"]["PolicyPush"]["pushes"] + 1


def test_tensorboard_curves_continue_at_the_step_they_reached(resumed):
    frames = resumed["saved"]["actorq"]["frames"]
    before, after = resumed["before"], resumed["after"]
    steps_before = [step for step, _ in before["collect/frames"]]  # the interruption saved the last one
    steps_after = [step for step, _ in after["collect/frames"]]
    assert steps_before == list(range(BATCH, frames + 1, BATCH))
    assert steps_after == list(range(frames + BATCH, TOTAL + 1, BATCH))  # no restart at 0, no gap
    assert min(step for tag in after for step, _ in after[tag]) > frames
    exploration = dict(before["collect/exploration"] + after["collect/exploration"])
    assert exploration[frames + BATCH] < exploration[frames]  # the schedule goes on, not back to its start
    learner_steps = dict(before["train/learner_steps"] + after["train/learner_steps"])
    assert learner_steps[frames + BATCH] >= learner_steps[frames]


def test_the_resumed_run_warns_about_nothing_it_does_on_purpose(resumed):
    for expected in ("exists and is not empty", "resuming from a checkpoint that ended before the epoch ended"):
        assert expected not in resumed["stderr"]


def test_periodic_checkpoints_keep_the_last_two(resumed):
    names = sorted(path.name for path in (resumed["run_dir"] / "checkpoints").iterdir())
    assert names == ["frames=5600.ckpt", "frames=6000.ckpt", "last.ckpt"]


PPO_OVERRIDES = ["+experiment=ppo_cartpole", "quant.bits=8", "algo.normalize_observations=true",
                 "eval.every_frames=100000", "~callbacks.carbon", "trainer.enable_progress_bar=false",
                 "trainer.precision=auto"]
PPO_STOP, PPO_TOTAL = 1024, 1536
INT8_KL = 1e-4  # what int8 actors alone cost, running the very version they were pushed, stays far below


def check_and_plant_plan(run_dir: Path, decided: dict) -> None:
    """Checks the plan ``run_dir``'s PPO run saved (its family's choices, the learner precision
    it measured: ``decided``) and rewrites that precision's reason, which a resume that timed
    again would not give."""
    plan = json.loads((run_dir / "plan.json").read_text())
    assert (plan["collection"], plan["push_every_n_steps"], plan["init_random_frames"]) == ("lockstep", 1, 0)
    assert plan["learner_precision"] == decided and decided["choice"] == "auto"
    plan["learner_precision"]["reason"] = "planted before the stop"
    (run_dir / "plan.json").write_text(json.dumps(plan))


def test_the_first_ppo_rollout_after_a_resume_runs_the_policy_before_the_stop(tmp_path):
    """The learner's behaviour KL on the first resumed rollout is int8's, as before the stop,
    not that of actors normalizing with a fresh learner's observation statistics."""
    from hydra import compose, initialize_config_module

    from actorq.train import train

    for total, resume in ((PPO_STOP, []), (PPO_TOTAL, ["ckpt_path=last"])):
        with initialize_config_module("actorq.conf", version_base="1.3"):
            cfg = compose("config", overrides=[*PPO_OVERRIDES, f"actors.total_frames={total}", f"run_dir={tmp_path}",
                                               *resume])
        summary, _ = train(cfg)
        if not resume:
            check_and_plant_plan(tmp_path, summary["learner_precision"])
    # the resumed run kept the learner precision its plan measured, untimed
    assert summary["learner_precision"]["reason"].startswith("planted before the stop")
    kl = dict(scalars(tmp_path / "tb")["train/kl_behaviour"])
    before = [kl[frames] for frames in range(256, PPO_STOP + 1, 256)]
    assert max(before) < INT8_KL, before
    assert kl[PPO_STOP + 256] < INT8_KL, f"first rollout after the resume: {kl[PPO_STOP + 256]}, before: {before}"
