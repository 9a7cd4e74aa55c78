"""``python -m benchmarks.results``: cells written, finished cells skipped, a cell cut off
midway run again, the table and plots rebuilt; the real Stable-Baselines3 as the peer."""

import json
import shutil

import numpy as np

import pytest

from benchmarks import results

QUICK = ["--quick", "--tasks", "dqn_cartpole", "--seeds", "0", "--impls", "actorq-fp32", "sb3"]


def test_results_cells_resume_and_table(tmp_path, capsys):
    out = tmp_path / "results"
    args = [*QUICK, "--out-dir", str(out)]
    document = results.main(args)
    cells = {p.parent.name: p for p in out.glob("cells/*/cell.json")}
    assert sorted(cells) == ["dqn_cartpole-actorq-fp32-seed0", "dqn_cartpole-sb3-seed0"]
    for path in cells.values():
        cell = json.loads(path.read_text())
        assert cell["frames"] >= 1024 and cell["curve"][-1]["frames"] == cell["frames"]
        assert cell["machine"]["cpu"] and cell["machine"]["load_end"]
    rows = document["tasks"]["dqn_cartpole"]["rows"]
    assert [row["impl"] for row in rows] == ["actorq-fp32", "sb3"]
    table = (out / "results.md").read_text()
    assert "| sb3 | 0 |" in table and "population standard deviation" in table
    plots = document["tasks"]["dqn_cartpole"]["plots"]
    assert sorted(plot.rsplit("_", 1)[-1] for plot in plots) == ["frames.png", "time.png"]
    assert all((out / plot).stat().st_size > 0 for plot in plots)
    probe = json.loads((out / "regime" / "dqn_cartpole.json").read_text())  # the actors, probed once
    assert set(probe["actor_fps"]) == {"fp32", "int8"} and min(probe["actor_fps"].values()) > 0
    regime = document["tasks"]["dqn_cartpole"]["regime"]
    assert regime["update_to_data"] == 0.5 and regime["learner_ups"] == rows[0]["updates_per_s"]
    assert regime["measured_speedup"] is None  # no int8 cells in this run
    assert "Regime map: actors alone" in (out / "results.md").read_text()
    probed = (out / "regime" / "dqn_cartpole.json").stat().st_mtime_ns

    written = {name: path.stat().st_mtime_ns for name, path in cells.items()}
    capsys.readouterr()
    results.main(args)  # both finished: nothing runs again
    assert capsys.readouterr().out.count("done before, skipped") == 2
    assert {name: path.stat().st_mtime_ns for name, path in cells.items()} == written
    assert (out / "regime" / "dqn_cartpole.json").stat().st_mtime_ns == probed

    peer = out / "cells" / "dqn_cartpole-sb3-seed0"
    (peer / "cell.json").unlink()  # a cell cut off before its done marker
    (peer / "leftover.tmp").write_text("half a run")
    results.main(args)
    assert (peer / "cell.json").is_file() and not (peer / "leftover.tmp").exists()
    assert cells["dqn_cartpole-actorq-fp32-seed0"].stat().st_mtime_ns == written["dqn_cartpole-actorq-fp32-seed0"]
    check_an_ab_of_one_setting(tmp_path, out, capsys)


def check_an_ab_of_one_setting(tmp_path, default, capsys):
    """``--ours`` reaches our cells and is kept to its own out-dir; ``benchmarks.compare_curves``
    plots the A/B's cells beside the default's."""
    from benchmarks import compare_curves

    with pytest.raises(SystemExit):  # the default's out-dir holds cells run without it
        results.main([*QUICK, "--out-dir", str(default), "--ours", "algo.gamma=0.9"])
    ab = tmp_path / "gamma"
    shutil.copytree(default / "regime", ab / "regime")  # the same task's actors, probed already
    results.main(["--quick", "--tasks", "dqn_cartpole", "--seeds", "0", "--impls", "actorq-fp32",
                  "--out-dir", str(ab), "--ours", "algo.gamma=0.9"])
    config = (ab / "cells" / "dqn_cartpole-actorq-fp32-seed0" / "run" / "config.yaml").read_text()
    assert "gamma: 0.9\n" in config
    capsys.readouterr()
    finals = compare_curves.main(["--task", "dqn_cartpole", "--name", "gamma_ab", "--out", str(tmp_path / "plots"),
                                  f"default={default}:actorq-fp32", f"gamma 0.9={ab}:actorq-fp32", f"SB3={default}:sb3"])
    assert list(finals) == ["default", "gamma 0.9", "SB3"] and all(len(v) == 1 for v in finals.values())
    assert (tmp_path / "plots" / "gamma_ab_return_vs_frames.png").stat().st_size > 0
    check_run_curves(tmp_path, [folder / "cells" / "dqn_cartpole-actorq-fp32-seed0" / "run" for folder in (default, ab)])


def check_run_curves(tmp_path, run_dirs):
    """``benchmarks.run_curves`` draws whole run dirs, a curve each, and finds each one's first
    evaluation at a target; the wall-clock plot only for runs said to have run alone."""
    from benchmarks import run_curves

    plots = tmp_path / "run_plots"
    sources = [f"run {index}={run_dir}" for index, run_dir in enumerate(run_dirs)]
    reached = run_curves.main(["--name", "runs", "--target=-1e9", "--out", str(plots), *sources])
    assert list(reached) == ["run 0", "run 1"] and all(frames > 0 for _, frames in reached.values())
    assert run_curves.main(["--name", "runs", "--target", "1e9", "--out", str(plots), *sources]) == \
        {"run 0": None, "run 1": None}
    assert (plots / "runs_return_vs_frames.png").stat().st_size > 0 and not (plots / "runs_return_vs_time.png").exists()
    run_curves.main(["--name", "runs", "--alone", "--out", str(plots), *sources])
    assert (plots / "runs_return_vs_time.png").stat().st_size > 0


def test_an_on_policy_task_is_probed_in_lock_step(tmp_path):
    """PPO collects and learns in turn: its probe measures the frames/s the learner waited for
    (a real short run per precision), and the regime line adds both sides' time per frame."""
    out = tmp_path / "results"
    document = results.main(["--quick", "--tasks", "ppo_cartpole", "--seeds", "0", "--impls", "actorq-fp32",
                             "--out-dir", str(out)])
    probe = json.loads((out / "regime" / "ppo_cartpole.json").read_text())
    assert probe["lockstep"] and set(probe["actor_fps"]) == {"fp32", "int8"} and min(probe["actor_fps"].values()) > 0
    assert probe["update_to_data"] == pytest.approx(20 / 256)  # 20 epochs of one 256-frame minibatch a round
    regime = document["tasks"]["ppo_cartpole"]["regime"]
    fp32_s_per_frame = 1 / probe["actor_fps"]["fp32"] + probe["update_to_data"] / regime["learner_ups"]
    int8_s_per_frame = 1 / probe["actor_fps"]["int8"] + probe["update_to_data"] / regime["learner_ups"]
    assert regime["speedup"] == pytest.approx(fp32_s_per_frame / int8_s_per_frame)
    assert "Regime map (lock-step): the learner waited" in (out / "results.md").read_text()


def test_results_refuses_without_the_peer_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "peer_installed", lambda: False)
    with pytest.raises(SystemExit) as stop:
        results.main([*QUICK, "--out-dir", str(tmp_path)])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "pip install 'actorq[bench]'" in error
    assert not (tmp_path / "cells").exists()


def test_results_summarize_only_rebuilds_from_cells(tmp_path):
    source = tmp_path / "a"
    results.main([*QUICK[:-2], "sb3", "--out-dir", str(source)])  # the SB3 cell only: seconds
    copy = tmp_path / "b"
    shutil.copytree(source / "cells", copy / "cells")
    document = results.main(["--summarize-only", "--out-dir", str(copy)])
    assert document["tasks"] == json.loads((source / "results.json").read_text())["tasks"]
    assert (copy / "results.md").read_text() == (source / "results.md").read_text()


def test_the_ppo_peer_is_sb3s_ppo_with_the_tasks_settings_on_its_vec_env():
    """The PPO cells' peer, built (not trained): RL Zoo's CartPole settings in SB3's names,
    the lin_ schedules as callables, ReLU units, 8 envs in this process."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from benchmarks.results_peer import make_on_policy_model

    task = results.SUITE["ppo_cartpole"]
    model = make_on_policy_model(task, 0, dict(task.peer_kwargs))
    assert isinstance(model.get_env(), DummyVecEnv) and model.get_env().num_envs == 8
    assert (model.n_steps, model.batch_size, model.n_epochs, model.gamma, model.gae_lambda) == (32, 256, 20, 0.98, 0.8)
    assert model.learning_rate(0.5) == pytest.approx(5e-4) and model.clip_range(0.25) == pytest.approx(0.05)
    assert [type(m).__name__ for m in model.policy.mlp_extractor.policy_net] == ["Linear", "ReLU", "Linear", "ReLU"]
    assert task.peer_kwargs["vec_env"] == "dummy"  # the one measured faster here (docs/results.md)


def test_the_halfcheetah_ppo_peer_normalizes_as_rl_zoo_and_is_evaluated_on_normalized_observations():
    """RL Zoo's ``normalize: true``: VecNormalize with PPO's gamma around one env; the
    evaluation hands the policy observations normalized with the training statistics; its
    updates are counted as gradient steps, as ours are."""
    import numpy as np
    from stable_baselines3.common.vec_env import VecNormalize

    from benchmarks.results_peer import gradient_steps, make_on_policy_model, policy_observation

    task = results.SUITE["ppo_half_cheetah"]
    model = make_on_policy_model(task, 0, dict(task.peer_kwargs))
    normalizer = model.get_vec_normalize_env()
    assert isinstance(normalizer, VecNormalize) and normalizer.gamma == 0.98 and model.get_env().num_envs == 1
    assert (model.n_steps, model.batch_size, model.n_epochs, model.clip_range(1.0)) == (512, 64, 20, 0.1)
    assert float(model.policy.log_std.mean()) == -2.0
    model._n_updates = 20  # one train(): SB3 counts its 20 epochs; each has 512 / 64 minibatches
    assert gradient_steps(model) == 160
    normalizer.obs_rms.mean, normalizer.obs_rms.var = np.ones(17), np.full(17, 4.0)
    normalized = policy_observation(model, np.full(17, 3.0))
    assert normalized == pytest.approx(np.ones(17), rel=1e-6)  # (3 - 1) / sqrt(4)


def test_the_breakout_peer_is_sb3s_cnn_ppo_on_rl_zoos_atari_env_and_plays_our_evaluation_games():
    """The ppo_breakout peer, built (not trained): CleanRL's settings in SB3's names, 8
    Breakouts behind AtariWrapper and 4 stacked frames, CnnPolicy; its evaluation samples the
    policy in whole games of our own Atari evaluation env, which hands it the frames its
    training env does (uint8 [4, 84, 84])."""
    pytest.importorskip("ale_py")
    from stable_baselines3.common.policies import ActorCriticCnnPolicy

    from benchmarks.results_peer import ScheduledEvaluation, make_on_policy_model

    task = results.SUITE["ppo_breakout"]
    model = make_on_policy_model(task, 0, dict(task.peer_kwargs))
    assert isinstance(model.policy, ActorCriticCnnPolicy) and model.get_env().num_envs == 8
    assert model.observation_space.shape == (4, 84, 84) and model.observation_space.dtype == np.uint8
    assert (model.n_steps, model.batch_size, model.n_epochs, model.ent_coef, model.clip_range(0.5)) == (128, 256, 4, 0.01, 0.1)
    assert model.learning_rate(0.5) == pytest.approx(1.25e-4)
    evaluation = ScheduledEvaluation(task.env_id, task.eval_every, 2, seed=0, deterministic=False,
                                     atari_game=task.atari_game)
    evaluation.init_callback(model)
    returns = evaluation.atari_returns(seed=10_000)
    assert len(returns) == 2 and all(score >= 0 and float(score).is_integer() for score in returns)  # raw scores
    assert evaluation.env.observation_spec["observation"].shape[-3:] == (4, 84, 84)
