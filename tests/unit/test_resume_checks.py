"""A bad ``ckpt_path`` stops the run with one ConfigError line before any actor process
starts: no such file, a truncated or tampered file, a checkpoint of another run's kind."""

import dataclasses
import multiprocessing
import os

import pytest
import torch

from actorq.util.errors import ConfigError
from actorq.train import train
from tests.conftest import TINY

DQN_CARTPOLE = {"algo": {"_target_": "actorq.algos.dqn.DQN"}, "env": {"name": "CartPole-v1"}}


class Payload:
    """What a tampered checkpoint smuggles in: code that runs when it is unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def fake_checkpoint(path, config=DQN_CARTPOLE, state_dict=None):
    torch.save({"state_dict": state_dict or {"q_network.trunk.0.weight": torch.zeros(3, 3)},
                "pytorch-lightning_version": "2.6.6", "optimizer_states": [], "loops": {},
                "datamodule_hyper_parameters": {"config": config}}, path)
    return path


def refused(make_cfg, ckpt_path, *overrides) -> str:
    cfg = make_cfg("+experiment=dqn_cartpole", *TINY, "algo.hidden=[16]", f"ckpt_path={ckpt_path}", *overrides)
    with pytest.raises(ConfigError) as error:
        train(cfg)
    assert "\n" not in str(error.value)  # one line
    assert multiprocessing.active_children() == []
    return str(error.value)


def test_last_without_a_checkpoint_in_the_run_dir(make_cfg):
    assert "ckpt_path=last: no checkpoint at" in refused(make_cfg, "last")


def test_a_missing_file(make_cfg, tmp_path):
    assert f"ckpt_path={tmp_path}/nope.ckpt: no such file" in refused(make_cfg, tmp_path / "nope.ckpt")


def test_a_truncated_file(make_cfg, tmp_path):
    path = fake_checkpoint(tmp_path / "whole.ckpt")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert "not a readable checkpoint" in refused(make_cfg, truncated)


def test_a_tampered_file_is_refused_without_running_its_code(make_cfg, tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "tampered.ckpt"
    torch.save({"state_dict": {}, "extra": Payload(marker)}, path)
    assert "not a readable checkpoint" in refused(make_cfg, path)
    assert not marker.exists()


def test_a_checkpoint_of_another_algorithm(make_cfg, tmp_path):
    path = fake_checkpoint(tmp_path / "sac.ckpt", {"algo": {"_target_": "actorq.algos.sac.SAC"},
                                                   "env": {"name": "Pendulum-v1"}})
    assert "the checkpoint is of algo._target_=actorq.algos.sac.SAC, this run has" in refused(make_cfg, path)


def test_a_checkpoint_of_a_finished_run(make_cfg, tmp_path):
    path = tmp_path / "done.ckpt"
    torch.save({**torch.load(fake_checkpoint(path), weights_only=True), "actorq": {"frames": 600}}, path)
    assert "has collected its 600 frames already (actors.total_frames=600)" in refused(make_cfg, path)


def test_a_checkpoint_of_other_networks(make_cfg, tmp_path):
    assert "the checkpoint's networks differ from this run's" in refused(make_cfg, fake_checkpoint(tmp_path / "x.ckpt"))


@pytest.mark.parametrize("contents", [{"weight": torch.zeros(2)}, {"state_dict": {}}], ids=["tensors", "no-version"])
def test_a_file_that_is_not_a_checkpoint(make_cfg, tmp_path, contents):
    path = tmp_path / "weights.pt"
    torch.save(contents, path)
    assert "not a Lightning checkpoint" in refused(make_cfg, path)


def test_a_weights_only_checkpoint(make_cfg, tmp_path):
    path = tmp_path / "weights.ckpt"
    torch.save({"state_dict": {}, "pytorch-lightning_version": "2.6.6"}, path)
    assert "a weights-only checkpoint (no optimizer and loop states) cannot resume" in refused(make_cfg, path)


def test_quant_auto_resumes_at_the_precision_the_checkpoint_ran_at():
    from actorq.quant import QuantSpec
    from actorq.run.resume import resumed_precision

    checkpoint = {"Experience": {"quant": dataclasses.asdict(QuantSpec(bits=8, mode="dynamic"))}}
    # the engine it ran: none named is torch.ao's default
    assert resumed_precision(checkpoint, QuantSpec(bits="auto")) == QuantSpec(bits=8, mode="dynamic", engine="x86")
    assert resumed_precision(checkpoint, QuantSpec(bits=32)) == QuantSpec(bits=32)  # a set precision is checked


def test_a_resumed_run_keeps_its_checkpoints_budget_where_the_plan_chose_one():
    """An SAC run checkpointed when ``quant.max_kl=auto`` still meant 0.01 resumes with it (the
    checkpoint check would refuse the plan's none); a budget named on the command line is kept."""
    from actorq.quant import QuantSpec
    from actorq.run.resume import resumed_precision

    checkpoint = {"Experience": {"quant": dataclasses.asdict(QuantSpec(bits=8, engine="x86", max_kl=0.01))}}
    planned = QuantSpec(bits=8, max_kl=None)
    assert resumed_precision(checkpoint, planned, budget_planned=True).max_kl == 0.01
    assert resumed_precision(checkpoint, planned).max_kl is None


@pytest.mark.parametrize(("saved_engine", "resumed_engine"), [(None, "x86"), ("plain", "plain"), ("onednn", "onednn")])
def test_a_resumed_run_keeps_the_engine_its_actors_ran(saved_engine, resumed_engine):
    """A checkpoint that names no engine ran torch.ao's default (an MLP's copy, or a
    convolutional one from before plain int8 tensors became the default there): resumed with
    ``quant.engine`` left null, its actors keep that engine, and the checkpoint check agrees."""
    from actorq.quant import QuantSpec
    from actorq.run.resume import resumed_precision, saved_quant

    checkpoint = {"Experience": {"quant": dataclasses.asdict(QuantSpec(bits=8, mode="static", engine=saved_engine))}}
    resumed = resumed_precision(checkpoint, QuantSpec(bits=8, mode="static"))
    assert resumed.engine == resumed_engine and saved_quant(checkpoint) == dataclasses.asdict(resumed)
    assert resumed_precision(checkpoint, QuantSpec(bits=8, mode="static", engine="fbgemm")).engine == "fbgemm"
    fp32 = {"Experience": {"quant": dataclasses.asdict(QuantSpec(bits=32))}}
    assert resumed_precision(fp32, QuantSpec(bits=32)) == QuantSpec(bits=32) and saved_quant(fp32)["engine"] is None


def test_the_saved_plan_names_the_budget_the_actors_run():
    """plan.json says what the actors did: a resumed run's budget is its checkpoint's, not the
    one ``quant.max_kl=auto`` would choose today."""
    from actorq.quant import QuantSpec
    from actorq.run.plan import RunPlan

    planned = RunPlan("async", 1, 0, 100, 1, max_kl=None)
    kept = planned.measured(None, QuantSpec(bits=8, max_kl=0.01))
    assert (kept.max_kl, kept.actor_precision) == (0.01, QuantSpec(bits=8).describe())
    assert planned.measured(None).max_kl is None  # a learner rank without actors keeps the plan's
