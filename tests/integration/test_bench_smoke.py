"""Every benchmark entry point runs (tiny sizes) and writes its JSON table."""

import json
import subprocess
import sys

import pytest

from actorq.bench import actors, kernels, learner, learning, recipes, regime, scaleout


@pytest.mark.parametrize("module", [learner, actors, kernels])
def test_benchmark_quick_run_writes_json(module, tmp_path):
    out = tmp_path / "result.json"
    rows = module.main(["--quick", "--out", str(out)])
    document = json.loads(out.read_text())
    assert document["rows"] == json.loads(json.dumps(rows)) and len(rows) >= 2
    if module is actors:  # the simulator's time under the policy is not counted as overhead
        for row in rows:
            assert row["policy_env_us"] > 0
            per_frame_us = 1e6 / row["frames_per_s"]
            assert row["overhead_us"] == pytest.approx(per_frame_us - row["policy_env_us"] - row["infer_us"])
            fp32 = next(r for r in rows if r["precision"] == "fp32" and r["envs"] == row["envs"])
            zero_overhead_us = row["policy_env_us"] + row["infer_us"]  # the ceiling: simulator + forward only
            assert row["ceiling_vs_fp32"] == pytest.approx((fp32["policy_env_us"] + fp32["infer_us"]) / zero_overhead_us)
    if module is kernels:  # every kernel timed, plain's ratios to torch.ao's taken from them
        for row in rows:
            assert all(row[f"{name}_us"] > 0 for name in ("fp32", "ao_dynamic", "plain_dynamic", "plain_coding",
                                                            "ao_static", "plain_static"))
            assert row["dynamic_x"] == pytest.approx(row["ao_dynamic_us"] / row["plain_dynamic_us"], abs=1e-3)
            assert row["static_x"] == pytest.approx(row["ao_static_us"] / row["plain_static_us"], abs=1e-3)


def test_learner_benchmark_times_compiled_losses_of_actor_critic_learners():
    rows = learner.main(["--quick", "--compile", "--algos", "td3", "dqn", "--peer", "none", "--out", ""])
    td3, dqn = rows
    assert td3["compiled_updates_per_s"] > 0
    assert td3["compile_gain"] == pytest.approx(td3["compiled_updates_per_s"] / td3["lightning_updates_per_s"])
    assert "compiled_updates_per_s" not in dqn  # DQN has no compile_losses


def test_learner_benchmark_refuses_too_few_frames_for_one_batch(capsys):
    with pytest.raises(SystemExit):
        learner.main(["--frames", "10", "--batches", "3", "--batch-size", "256", "--out", ""])
    assert "must reach --batch-size (256)" in capsys.readouterr().err


def test_learning_benchmark_pairs_fp32_and_int8(tmp_path):
    rows = learning.main(["--quick", "--experiments", "dqn_cartpole", "--out", str(tmp_path / "l.json"),
                          "--runs-dir", str(tmp_path / "runs")])
    assert [row["actors"] for row in rows] == ["fp32", "int8 dynamic per_channel fp32-ends"]
    assert all(row["frames"] >= 1000 for row in rows)


def test_recipes_benchmark_quantizes_one_trained_network_per_run(tmp_path):
    args = ["--quick", "--experiments", "dqn_cartpole", "--seeds", "0", "--runs-dir", str(tmp_path / "runs")]
    rows = recipes.main([*args, "--out", str(tmp_path / "r.json")])
    assert [row["recipe"] for row in rows] == ["fp32", *recipes.RECIPES]
    assert all(row["return"] > 0 for row in rows)
    trained = tmp_path / "runs" / "dqn_cartpole-seed0" / "trained.pt"
    written = trained.stat().st_mtime_ns
    again = recipes.main([*args, "--recipes", "int8_static", "--out", ""])  # reuses it: no training
    assert trained.stat().st_mtime_ns == written and again[1]["return"] == rows[1]["return"]


def test_regime_benchmark_predicts_a_grid_and_checks_it_with_real_runs(tmp_path):
    plot = tmp_path / "regime.png"
    rows = regime.main(["--quick", "--out", str(tmp_path / "r.json"), "--plot", str(plot)])
    assert [(row["learner_precision"], row["width"], row["update_to_data"]) for row in rows] == [
        ("32-true", 64, 0.25), ("32-true", 64, 1.0), ("bf16-mixed", 64, 0.25), ("bf16-mixed", 64, 1.0)]
    for row in rows:
        slower_side = min(row["actor_fps_fp32"], row["learner_ups"] / row["update_to_data"])
        assert row["predicted_fps_fp32"] == pytest.approx(slower_side)
    assert rows[0]["learner_ups"] != rows[2]["learner_ups"]  # each learner precision timed on its own
    checked = rows[1]  # --quick checks 64:1.0 with a real fp32 run and a real int8 run
    assert checked["measured_speedup"] > 0 and checked["measured_speedup"] == checked["measured_speedup"]
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_scaleout_benchmark_times_learner_ranks_backends_broadcasts_and_lock_step(tmp_path):
    out = tmp_path / "s.json"
    tables = scaleout.main(["--quick", "--out", str(out)])
    one, two = tables["learners"]
    assert (one["ranks"], two["ranks"]) == (1, 2) and two["batch_per_rank"] == one["batch_per_rank"] // 2
    assert two["steps_per_rank"] == [two["updates"]] * 2 and two["updates"] == one["updates"] > 0
    assert two["max_weight_difference"] == 0.0 and one["updates_per_s"] > 0 and two["updates_per_s"] > 0
    assert [row["backend"] for row in tables["backend"]] == ["process", "ray"]
    assert all(row["frames_per_s"] > 0 for row in tables["backend"])
    fp32, int8 = tables["push"]
    assert (fp32["precision"], int8["precision"]) == ("fp32", "int8 static")
    assert 0.2 < int8["bytes_vs_fp32"] < 0.3  # int8 weights, fp32 first and last layers and scales
    assert [(row["workers"], row["envs_per_worker"]) for row in tables["lockstep"]] == [(2, 2)]  # hybrid: 2 envs each
    assert all(row[f"{scheme}_frames_per_s"] > 0 for row in tables["lockstep"]
               for scheme in ("sync", "async_1_in_flight", "async"))
    tables_in_json = [row["table"] for row in json.loads(out.read_text())["rows"]]
    assert tables_in_json == ["learners"] * 2 + ["backend"] * 2 + ["push"] * 2 + ["lockstep"]


def test_dispatcher_lists_benchmarks_and_rejects_unknown_names():
    result = subprocess.run([sys.executable, "-m", "actorq.bench", "nope"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    for name in ("learner", "inference", "actors", "replay", "learning", "recipes", "regime", "scaleout"):
        assert name in result.stderr


def test_heavy_tail_benchmark_runs_every_implementation_at_the_same_updates_per_frame(tmp_path):
    """``python -m benchmarks.heavy_tail``, tiny: asynchronous (gathered rounds, and each
    worker's batch alone) and lock-step actorq PPO and SB3's PPO on SubprocVecEnv, each over 2
    heavy-tailed CartPoles for the same frames and updates."""
    from benchmarks import heavy_tail

    out = tmp_path / "heavy_tail.json"
    rows = heavy_tail.main(["--envs", "2", "--frames", "1024", "--out", str(out)])
    assert [row["impl"] for row in rows] == list(heavy_tail.IMPLEMENTATIONS)
    assert all(row["frames"] >= 1024 and row["frames_per_s"] > 0 for row in rows)
    assert len({row["updates"] for row in rows}) == 1, rows  # 20 epochs of each 64-frame rollout
    lag = {row["impl"]: row["policy_lag_max"] for row in rows}
    assert lag["actorq-lockstep"] == 0
    assert json.loads(out.read_text())["machine"]["cpu"]


def test_fleet_benchmark_times_one_pinned_actor_core_and_sizes_the_fleet(tmp_path):
    """In its own process: the benchmark pins the process it runs in to one core."""
    from actorq.bench.fleet import DEFAULT_ENGINES
    from actorq.quant._ao import DEFAULT_ENGINE
    from actorq.quant.onednn import default_engine

    out = tmp_path / "fleet.json"
    result = subprocess.run([sys.executable, "-m", "actorq.bench", "fleet", "--quick", "--learner-fps", "1000",
                             "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    measured, sized = [row for row in rows if "actor_fps" in row], [row for row in rows if "actor_cores" in row]
    env, fp32, fp32_last, *int8s = measured
    assert env["precision"] == "env alone (ale)" and fp32["precision"] == "fp32"
    assert fp32_last["precision"] == "fp32 channels-last"
    assert [row["engine"] for row in int8s] == DEFAULT_ENGINES
    # what a run gets: the default engine's copy (plain int8 tensors where torch has the kernels)
    # under plain quant.bits=8, the others by override
    assert [row["engine"] for row in int8s if row["run_with"] == "quant.bits=8"] == \
        [default_engine(convolutional=True) or DEFAULT_ENGINE]
    fastest_fp32 = min(fp32["core_s_per_frame"], fp32_last["core_s_per_frame"])
    for int8 in int8s:
        assert int8["precision"] == f"int8 static ({int8['engine']})"
        assert int8["vs_fp32"] == pytest.approx(fastest_fp32 / int8["core_s_per_frame"])
        assert int8["payload_bytes"] < fp32["payload_bytes"] / 3 and int8["quantize_ms"] > 0
    for row in (fp32, fp32_last, *int8s):
        assert row["core_s_per_frame"] == pytest.approx(1 / row["actor_fps"])
        assert row["ceiling_fps"] < env["actor_fps"]  # the policy costs time on top of the env
    cores = {row["precision"]: row["actor_cores"] for row in sized}
    assert cores["fp32"] == pytest.approx(1000 * fp32["core_s_per_frame"])
    assert len(cores) == 2 + len(int8s)


def test_pixel_learner_benchmark_times_the_update_loop_beside_the_real_learner(tmp_path):
    from actorq.bench import pixel_learner

    out = tmp_path / "pixel_learner.json"
    rows = pixel_learner.main(["--quick", "--devices", "cpu", "--check-learner", "--out", str(out)])
    loop, real = rows
    assert (loop["what"], real["what"]) == ("update loop", "actorq PPO learner")
    for row in rows:
        assert row["learner_fps"] == pytest.approx(1024 / (row["ms_per_rollout"] / 1e3))
    assert 0.5 < loop["learner_fps"] / real["learner_fps"] < 2  # the same arithmetic, timed twice
    assert json.loads(out.read_text())["rows"] == json.loads(json.dumps(rows))
