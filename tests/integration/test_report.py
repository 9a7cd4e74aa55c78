"""``actorq report``: a tiny real sweep (fp32 and int8 actors, one seed), and run
dirs made of real-shaped files (a composed config, a summary with train()'s keys, TensorBoard
events at chosen wall times) for what one tiny sweep cannot show."""

import json
import shutil
import subprocess
import sys
import time

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from actorq.report import main, read_run
from tests.conftest import TINY
from tests.integration.test_smoke import run_cli

PNG = b"\x89PNG\r\n\x1a\n"
INT8 = "int8 dynamic per_channel fp32-ends"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("sweep")
    result = run_cli("-m", "+experiment=dqn_cartpole", *TINY, "algo.hidden=[16]", "callbacks=no_checkpoint",
                     "quant.bits=32,8", f"hydra.sweep.dir={sweep_dir}", cwd=sweep_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    return sweep_dir


def table_rows(report: str, column: str = "final return") -> dict[str, dict[str, str]]:
    """``{precision: {header: cell}}`` of the first table that has ``column``."""
    tables, current = [], []
    for line in [*report.splitlines(), ""]:
        if line.startswith("| "):
            current.append([cell.strip() for cell in line.strip("|").split("|")])
        elif line.startswith("|---"):
            continue
        elif current:
            tables.append(current)
            current = []
    header, *rows = next(t for t in tables if column in t[0])
    for cells in rows:
        assert len(cells) == len(header), cells
    return {cells[0]: dict(zip(header, cells)) for cells in rows}


def test_report_of_a_sweep_has_the_table_and_plots(sweep, tmp_path):
    out = tmp_path / "report"
    result = subprocess.run([sys.executable, "-m", "actorq.report", str(sweep), "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = (out / "report.md").read_text()
    assert "## DQN on CartPole-v1 (dqn_cartpole)" in report
    rows = table_rows(report)
    assert set(rows) == {"fp32", INT8}
    fp32, int8 = rows["fp32"], rows[INT8]
    assert fp32["seeds"] == int8["seeds"] == "1 of 1 completed; n=1: not a claim"
    assert int8["int8 policy's own return"] != "—" and fp32["int8 policy's own return"] == "—"
    summaries = {json.loads(p.read_text())["actor_precision"]: json.loads(p.read_text())
                 for p in sweep.glob("*/summary.json")}
    assert float(fp32["final return"].split(" ± ")[0]) == summaries["fp32"]["final_return"]
    cost = table_rows(report, "time to target (s)")
    assert cost["fp32"]["speedup vs fp32"] == "1.00x"
    if summaries["fp32"]["energy"]["kwh"] is not None:
        assert float(cost["fp32"]["kWh"].split()[0]) > 0 and cost["fp32"]["carbon reduction vs fp32"] == "1.00x"
        assert cost["fp32"]["energy method"].startswith(("estimate, no power counter: ", "measured: "))
    speed = table_rows(report, "frames/s")
    assert speed["fp32"]["frames/s vs fp32"] == "1.00x" and float(speed[INT8]["start-up (s)"]) > 0
    assert " x " in speed[INT8]["push bytes (per push x pushes)"]
    assert "Regime of the fp32 runs: " in report
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == ["dqn_on_cartpole_v1_return_vs_frames.png",
                                      "dqn_on_cartpole_v1_return_vs_time.png"]
    assert all(p.read_bytes().startswith(PNG) and p.stat().st_size > 1000 for p in pngs)
    assert all(f"]({p.name})" in report for p in pngs)
    assert "## Missing or crashed runs\n\n- none" in report
    printed = result.stdout  # the same tables, for the terminal (what `make run` ends with)
    assert table_rows(printed) == rows and "## DQN on CartPole-v1" in printed and "![" not in printed
    assert table_rows(printed, "frames/s") == speed


def test_crashed_and_missing_runs_are_reported_not_averaged(sweep, tmp_path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    int8_run = next(p.parent for p in copy.glob("*/summary.json")
                    if json.loads(p.read_text())["actor_precision"] != "fp32")
    (int8_run / "summary.json").unlink()  # crashed mid-run
    died = copy / "9"  # a job that died after writing only its config
    died.mkdir()
    fp32_run = next(p.parent for p in copy.glob("*/summary.json"))
    (died / "config.yaml").write_text((fp32_run / "config.yaml").read_text().replace("seed: 0", "seed: 5"))
    assert main([str(copy)]) == 0
    report = (copy / "report.md").read_text()
    rows = table_rows(report)
    assert rows["fp32"]["seeds"] == "1 of 2 completed (1 missing/crashed); n=1: not a claim"
    assert rows["int8 dynamic per_channel fp32-ends"]["seeds"] == "0 of 1 completed (1 missing/crashed); n=0: not a claim"
    assert rows["int8 dynamic per_channel fp32-ends"]["final return"] == "—"
    crashed = report.split("## Missing or crashed runs")[1]
    assert f"`{int8_run}`: DQN on CartPole-v1, int8 dynamic per_channel fp32-ends, seed 0: crashed (no summary.json)" in crashed
    assert f"`{died}`: DQN on CartPole-v1, fp32, seed 5: crashed (no summary.json)" in crashed


def test_report_says_clearly_when_there_is_nothing_to_read(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no run dirs" in capsys.readouterr().err


# --- run dirs from real-shaped files --------------------------------------------------

ESTIMATED = {  # codecarbon on a VM without power counters, as carbon.py records it
    "kwh": 2.9e-05, "co2_kg": 1.07e-05, "cpu_kwh": 2.6e-06, "ram_kwh": 2.64e-05, "gpu_kwh": 0.0,
    "method": {"ram": "estimate from installed RAM size", "cpu": "cpu_load"},
    "tracking_mode": "machine", "tool": "codecarbon OfflineEmissionsTracker", "codecarbon_version": "3.3.2",
    "country_iso_code": "USA", "region": None,
}
MEASURED = {**ESTIMATED, "method": {"ram": "estimate from installed RAM size", "cpu": "intel_rapl"}}


def fake_run(run_dir, *, bits=32, seed=0, startup_s=20.0, evals=((30.0, 2000, 200.0),), frames_per_s=100.0,
             updates_per_s=50.0, collect_fraction=0.2, energy=ESTIMATED, experiment=None, learner_precision=None,
             eval_quant_s=()):
    """A run dir as train() leaves it: config.yaml (composed by Hydra), summary.json, and
    TensorBoard events whose first event is the logger opening, ``startup_s`` before the first
    collected frame; ``evals`` are (seconds after that frame, frames, return); ``eval_quant_s``
    the seconds spent evaluating the quantized policy up to each evaluation."""
    from torch.utils.tensorboard import SummaryWriter

    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=dqn_cartpole", f"quant.bits={bits}", f"seed={seed}",
                                           f"run_dir={run_dir}"])
    run_dir.mkdir(parents=True)
    config = OmegaConf.to_container(cfg, resolve=True)
    if experiment:
        config["experiment"] = experiment
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(config))
    writer = SummaryWriter(str(run_dir / "tb"))  # its first event: now
    first_frame = time.time() + startup_s
    last_frames = max(frames for _, frames, _ in evals)
    for frames in range(100, last_frames + 1, 100):
        writer.add_scalar("collect/frames", frames, frames, walltime=first_frame + (frames - 100) / frames_per_s)
    for seconds, frames, value in evals:
        writer.add_scalar("eval/return_mean", value, frames, walltime=first_frame + seconds)
    for (seconds, frames, _), uncounted in zip(evals, eval_quant_s):  # written after the return, as train() does
        writer.add_scalar("time/eval_quant_s", uncounted, frames, walltime=first_frame + seconds + 0.01)
    writer.close()
    history = [[frames, value] for _, frames, value in evals]
    summary = {"status": "completed", "final_return": history[-1][1], "best_return": max(v for _, v in history),
               "final_return_quant": history[-1][1] if bits != 32 else None,
               "actor_precision": "fp32" if bits == 32 else INT8, "eval_history": history,
               "eval_history_quant": history if bits != 32 else [], "frames": last_frames,
               "learner_steps": last_frames // 2, "wall_clock_s": startup_s + evals[-1][0],
               "frames_per_s": last_frames / (startup_s + evals[-1][0]), "learner_updates_per_s": updates_per_s,
               "collect_fraction": collect_fraction, "energy": energy, "learner_precision": learner_precision}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return run_dir


def test_time_to_target_counts_from_the_first_collected_frame(tmp_path):
    # fp32: 20 s of start-up, then 30 s to the target; int8: 5 s, then 20 s. From the logger
    # opening that would be 50 s against 25 s (2.00x); from the first frame it is 1.50x.
    fake_run(tmp_path / "0", bits=32, startup_s=20.0, evals=[(10.0, 1000, 50.0), (30.0, 2000, 200.0)])
    fake_run(tmp_path / "1", bits=8, startup_s=5.0, evals=[(10.0, 1000, 60.0), (20.0, 2000, 200.0)])
    assert main([str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    cost = table_rows(report, "time to target (s)")
    assert cost["fp32"]["time to target (s)"] == "30.0 ± 0.0" and cost[INT8]["time to target (s)"] == "20.0 ± 0.0"
    assert cost[INT8]["speedup vs fp32"] == "1.50x"
    speed = table_rows(report, "start-up (s)")
    assert speed["fp32"]["start-up (s)"] == "20.0" and speed[INT8]["start-up (s)"] == "5.0"
    assert "Run order: fp32 ran before int8" in report  # fp32 was written first for its one seed


def test_the_quantized_policys_evaluations_are_left_out_of_the_clock(tmp_path):
    # The same training time (30 s to the target), but the int8 run also spent 4 s evaluating
    # its actors' policy at each of its two evaluations: not training, not counted.
    fake_run(tmp_path / "0", bits=32, startup_s=5.0, evals=[(10.0, 1000, 50.0), (30.0, 2000, 200.0)])
    fake_run(tmp_path / "1", bits=8, startup_s=5.0, evals=[(14.0, 1000, 60.0), (38.0, 2000, 200.0)],
             eval_quant_s=[4.0, 8.0])
    assert main([str(tmp_path)]) == 0
    cost = table_rows((tmp_path / "report.md").read_text(), "time to target (s)")
    assert cost[INT8]["time to target (s)"] == "30.0 ± 0.0" and cost[INT8]["speedup vs fp32"] == "1.00x"


def test_a_resumed_runs_pause_between_sittings_is_left_out_of_the_clock(tmp_path):
    # Sitting 1: evaluated at 10 s (its last event). Sitting 2 (`actorq resume`, a new event
    # file) starts an hour later and reaches the target 20 s in: 30 s of the run's time.
    from torch.utils.tensorboard import SummaryWriter

    run_dir = fake_run(tmp_path / "0", bits=32, startup_s=5.0, evals=[(10.0, 1000, 50.0)])
    resumed_at = read_run(run_dir).started_at + 5.0 + 10.0 + 3600.0
    writer = SummaryWriter(str(run_dir / "tb"))
    for frames in range(1100, 2001, 100):
        writer.add_scalar("collect/frames", frames, frames, walltime=resumed_at + (frames - 1100) / 50)
    writer.add_scalar("eval/return_mean", 200.0, 2000, walltime=resumed_at + 20.0)
    writer.close()
    run = read_run(run_dir)
    assert [(round(seconds, 3), frames) for seconds, frames, _ in run.evals] == [(10.0, 1000), (30.0, 2000)]
    assert run.frames_per_s == pytest.approx(1900 / 28.0, rel=1e-3)  # 10 s of sitting 1 (its last frames at 9), 18 of 2


def test_the_speed_table_says_which_precision_the_learner_ran_at(tmp_path):
    fake_run(tmp_path / "0", bits=32, learner_precision={"precision": "bf16-mixed", "choice": "auto"})
    fake_run(tmp_path / "1", bits=8, learner_precision={"precision": "32-true", "choice": "32-true"})
    assert main([str(tmp_path)]) == 0
    speed = table_rows((tmp_path / "report.md").read_text(), "start-up (s)")
    assert speed["fp32"]["learner precision"] == "bf16-mixed (auto)"
    assert speed[INT8]["learner precision"] == "32-true"


def test_sweeps_that_alternate_the_precision_order_get_no_run_order_note(tmp_path):
    for name, bits, seed in [("seed0/0", 32, 0), ("seed0/1", 8, 0), ("seed1/0", 8, 1), ("seed1/1", 32, 1)]:
        fake_run(tmp_path / name, bits=bits, seed=seed)  # in this order: their first events are in it
        time.sleep(0.01)
    assert main([str(tmp_path)]) == 0
    assert "Run order" not in (tmp_path / "report.md").read_text()


def test_fewer_than_three_seeds_are_not_a_claim(tmp_path):
    for seed in range(3):
        fake_run(tmp_path / f"fp32_{seed}", bits=32, seed=seed)
    fake_run(tmp_path / "int8_0", bits=8, seed=0)
    assert main([str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    rows = table_rows(report)
    assert rows["fp32"]["seeds"] == "3 of 3 completed"
    assert rows[INT8]["seeds"] == "1 of 1 completed; n=1: not a claim"
    assert table_rows(report, "time to target (s)")[INT8]["seeds"] == rows[INT8]["seeds"]
    assert "with n=1 seed for a precision, a difference in return, frames to target or time to target is " \
           "one draw of training noise" in report


def test_speed_is_shown_apart_from_learning(tmp_path):
    # int8 actors twice as fast, but this seed of int8 needed twice the frames: the speed
    # table says 2.00x, the learning table says 2000 against 4000 frames.
    fake_run(tmp_path / "0", bits=32, frames_per_s=500.0, updates_per_s=100.0, evals=[(20.0, 2000, 200.0)])
    fake_run(tmp_path / "1", bits=8, frames_per_s=1000.0, updates_per_s=150.0,
             evals=[(2.0, 2000, 20.0), (20.0, 4000, 200.0)])
    assert main([str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    speed = table_rows(report, "frames/s")
    assert [speed[p]["frames/s"] for p in ("fp32", INT8)] == ["500", "1000"]
    assert speed[INT8]["frames/s vs fp32"] == "2.00x" and speed[INT8]["updates/s vs fp32"] == "1.50x"
    learning = table_rows(report, "frames to target")
    assert learning["fp32"]["frames to target"] == "2000 ± 0" and learning[INT8]["frames to target"] == "4000 ± 0"
    assert "frames/s" not in " ".join(learning[INT8]) and "frames to target" not in speed[INT8]


def test_energy_names_its_method_and_flags_estimates(tmp_path):
    fake_run(tmp_path / "0", bits=32, energy=ESTIMATED)
    fake_run(tmp_path / "1", bits=8, energy=MEASURED)
    assert main([str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    cost = table_rows(report, "energy method")
    assert cost["fp32"]["kWh"] == "2.9e-05 (estimate)" and cost[INT8]["kWh"] == "2.9e-05"
    assert cost["fp32"]["energy method"] == (
        "estimate, no power counter: ram: flat, from its size; cpu: TDP x load; 91% of the kWh a constant")
    assert cost[INT8]["energy method"].startswith("measured: ram: flat, from its size; cpu: intel_rapl counter")
    energy = report.split("## Energy measurement")[1]
    assert "estimate, no power counter: ram: flat, from its size; cpu: TDP x load; carbon intensity of USA" in energy


@pytest.mark.parametrize("collect_fraction, regime", [
    (0.15, "learner-bound (the learner was busy 85% of the loop; actors 15%): even actors that cost nothing "
           "would shorten them at most 1.18x, so int8 actors cannot shorten this run much."),
    (0.7, "actor-bound (the learner was busy 30% of the loop; actors 70%): faster actors shorten them, "
          "at most 3.33x if collection cost nothing"),
])
def test_one_line_says_which_regime_the_runs_were_in(tmp_path, collect_fraction, regime):
    fake_run(tmp_path / "0", bits=32, collect_fraction=collect_fraction)
    fake_run(tmp_path / "1", bits=8, collect_fraction=0.01)  # the fp32 runs set the regime
    assert main([str(tmp_path)]) == 0
    assert f"Regime of the fp32 runs: {regime}" in (tmp_path / "report.md").read_text()


def test_hydra_log_folders_are_not_runs_and_run_dir_runs_keep_their_experiment(tmp_path):
    fake_run(tmp_path / "runs" / "a", bits=32, experiment="td3_pendulum")
    fake_run(tmp_path / "runs" / "b", bits=8, experiment="td3_pendulum")
    logs = tmp_path / "outputs" / "2026-11-25" / "10-00-00"  # Hydra's own folder of a run_dir= run
    (logs / ".hydra").mkdir(parents=True)
    (logs / ".hydra" / "config.yaml").write_text((tmp_path / "runs" / "a" / "config.yaml").read_text())
    (logs / "__main__.log").write_text("")
    assert main([str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert table_rows(report)["fp32"]["seeds"] == "1 of 1 completed; n=1: not a claim"  # not two fp32 runs
    assert "2 runs from" in report and "## DQN on CartPole-v1 (td3_pendulum)" in report
    assert "Not runs, not counted: 1 Hydra folder without a config.yaml" in report
    assert "## Missing or crashed runs\n\n- none" in report
