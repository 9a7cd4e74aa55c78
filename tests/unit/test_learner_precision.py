"""``trainer.precision=auto`` and the explicit-bf16 warning, decided from GIVEN timings.

The timings here are made up (a stand-in replaces the measurement), so no test depends on
what a timing race on this machine decides; one test runs the real measurement only to check
what it returns and that it leaves the learner and the random state untouched.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from actorq.run import learner_precision as lp
from actorq.algos.base import Exploration
from actorq.algos.dqn import DQN
from actorq.algos.ppo import PPO
from actorq.algos.td3 import TD3
from actorq.run.checks import check_trainer
from actorq.envs import EnvSpec
from actorq.util.errors import ConfigError
from actorq.util.memory_format import has_layout_choice, uses_channels_last

PENDULUM = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))


def td3(width: int = 16, batch_size: int = 8) -> TD3:
    return TD3(PENDULUM, Exploration(0.1), actor_hidden=(width,), critic_hidden=(width,), batch_size=batch_size)


@pytest.fixture
def given(monkeypatch, tmp_path):
    """Replaces the measurement with given timings; counts the calls; a fresh cache dir."""
    monkeypatch.setenv("ACTORQ_CACHE_DIR", str(tmp_path / "actorq"))
    monkeypatch.delenv(lp.RANK_ENV, raising=False)  # restored after the test
    calls = []

    def use(timings: dict[str, float]) -> list:
        calls.clear()

        def fake(learner, device="cpu", **kwargs):
            calls.append(device)
            return dict(timings)

        monkeypatch.setattr(lp, "time_updates", fake)
        return calls

    return use


@pytest.mark.parametrize(("fp32", "bf16", "picked"), [
    (30.0, 10.0, "bf16-mixed"),  # native bf16, wide network
    (10.0, 400.0, "32-true"),  # emulated bf16
    (10.0, 9.6, "32-true"),  # within the 5% margin: full precision
    (10.0, 9.4, "bf16-mixed"),  # just past it
    (10.0, 10.0, "32-true"),
])
def test_choose_picks_bf16_only_when_clearly_faster(fp32, bf16, picked):
    assert lp.choose({"32-true": fp32, "bf16-mixed": bf16})[0] == picked


@pytest.mark.parametrize(("fp32", "bf16"), [(30.0, 10.0), (10.0, 400.0), (10.0, 9.6), (10.0, 9.4), (5.0, 5.2)])
def test_auto_is_never_below_095_of_the_faster(fp32, bf16):
    timings = {"32-true": fp32, "bf16-mixed": bf16}
    picked, _ = lp.choose(timings)
    assert min(timings.values()) / timings[picked] >= 0.95


def test_choose_reason_names_both_timings_and_the_ratio():
    _, reason = lp.choose({"32-true": 30.0, "bf16-mixed": 10.0})
    assert "30 ms" in reason and "10 ms" in reason and "3.00x faster" in reason


def test_auto_runs_the_faster_and_says_why(given):
    given({"32-true": 30.0, "bf16-mixed": 10.0})
    decided = lp.resolve_learner_precision("auto", td3(), accelerator="cpu")
    assert decided.precision == "bf16-mixed" and decided.choice == "auto" and not decided.cached
    assert decided.timings_ms == {"32-true": 30.0, "bf16-mixed": 10.0}
    assert "3.00x faster" in decided.reason
    summary = decided.summary()
    assert set(summary) == {"precision", "choice", "reason", "timings_ms", "cached", "channels_last", "micro_batch_size"}
    assert not decided.channels_last and "channels-last" not in decided.reason  # an MLP has no layout to choose
    json.dumps(summary)  # goes into summary.json as it is


def test_auto_keeps_fp32_where_bf16_is_slower(given):
    given({"32-true": 10.0, "bf16-mixed": 400.0})
    assert lp.resolve_learner_precision("auto", td3(), accelerator="cpu").precision == "32-true"


def test_timings_are_cached_per_shape(given):
    calls = given({"32-true": 30.0, "bf16-mixed": 10.0})
    first = lp.resolve_learner_precision("auto", td3(width=16), accelerator="cpu")
    again = lp.resolve_learner_precision("auto", td3(width=16), accelerator="cpu")
    assert len(calls) == 1 and again.cached and again.timings_ms == first.timings_ms
    other_width = lp.resolve_learner_precision("auto", td3(width=32), accelerator="cpu")
    other_batch = lp.resolve_learner_precision("auto", td3(width=16, batch_size=16), accelerator="cpu")
    assert len(calls) == 3 and not other_width.cached and not other_batch.cached
    assert len(json.loads(lp.cache_path().read_text())) == 3


def test_an_unreadable_cache_is_measured_again(given):
    calls = given({"32-true": 30.0, "bf16-mixed": 10.0})
    lp.cache_path().parent.mkdir(parents=True)
    lp.cache_path().write_text("{not json")
    assert lp.resolve_learner_precision("auto", td3(), accelerator="cpu").precision == "bf16-mixed"
    assert len(calls) == 1


def test_explicit_bf16_without_native_bf16_warns_once_with_the_ratio(given, monkeypatch, caplog):
    given({"32-true": 10.0, "bf16-mixed": 200.0})
    monkeypatch.setattr(lp, "native_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger=lp.__name__):
        decided = lp.resolve_learner_precision("bf16-mixed", td3(), accelerator="cpu")
    assert decided.precision == "bf16-mixed" and decided.choice == "configured"  # runs as asked
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "20.00x slower" in warnings[0] and "without native bf16" in warnings[0]
    assert "20.00x" in decided.reason


def test_explicit_bf16_with_native_bf16_is_not_measured(given, monkeypatch, caplog):
    calls = given({"32-true": 10.0, "bf16-mixed": 200.0})
    monkeypatch.setattr(lp, "native_bf16", lambda: True)
    with caplog.at_level(logging.WARNING, logger=lp.__name__):
        decided = lp.resolve_learner_precision("bf16-mixed", td3(), accelerator="cpu")
    assert decided.precision == "bf16-mixed" and decided.timings_ms is None and not calls
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_explicit_fp32_is_not_measured(given):
    calls = given({"32-true": 10.0, "bf16-mixed": 1.0})
    decided = lp.resolve_learner_precision("32-true", td3(), accelerator="cpu")
    assert decided.precision == "32-true" and decided.choice == "configured" and not calls


def test_learner_ranks_run_rank_zeros_decision(given, monkeypatch):
    """A rank Lightning starts inherits rank 0's environment and must not measure (its own
    race could pick another precision than rank 0's)."""
    given({"32-true": 30.0, "bf16-mixed": 10.0})
    rank0 = lp.resolve_learner_precision("auto", td3(), accelerator="cpu")
    calls = given({"32-true": 10.0, "bf16-mixed": 400.0})  # what rank 1 would measure
    monkeypatch.setattr(lp, "launched_rank", lambda: 1)
    assert lp.resolve_learner_precision("auto", td3(), accelerator="cpu") == rank0 and not calls


def learner_of(algo: str):
    if algo == "td3":
        return td3()
    if algo == "dqn":
        return DQN(EnvSpec(obs_dim=4, discrete=True, num_actions=2), Exploration(0.1), hidden=(16,), batch_size=8)
    frames = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
    return PPO(frames, minibatch_size=4)  # on minibatches of a rollout of uint8 frames, a conv trunk


@pytest.mark.parametrize("algo", ["td3", "dqn", "ppo_frames"])
def test_measurement_times_both_and_leaves_the_learner_and_random_state_alone(algo):
    """TD3's target smoothing noise draws from the global generator: a run measured by auto
    must see the same random stream as one at an explicit precision."""
    learner = learner_of(algo)
    weights = {name: p.clone() for name, p in learner.named_parameters()}
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    timings = lp.time_updates(learner, rounds=1, max_rounds=1)
    assert torch.equal(torch.rand(3), expected)
    assert set(timings) == {"32-true", "bf16-mixed"} and all(ms > 0 for ms in timings.values())
    assert all(torch.equal(p, weights[name]) for name, p in learner.named_parameters())
    assert learner.learner_steps == 0


@pytest.mark.parametrize("value", ["auto", "32-true", "bf16-mixed", 32])
def test_run_config_accepts_auto_and_lightning_precisions(make_cfg, value):
    cfg = make_cfg("+experiment=dqn_cartpole")
    cfg.trainer.precision = value
    check_trainer(cfg)


def test_run_config_refuses_an_unknown_precision(make_cfg):
    cfg = make_cfg("+experiment=dqn_cartpole")
    cfg.trainer.precision = "fastest"
    with pytest.raises(ConfigError, match="trainer.precision must be auto"):
        check_trainer(cfg)


def test_precision_benchmark_quick_run_writes_its_table(tmp_path):
    from actorq.bench import learner as bench

    out = tmp_path / "precision.json"
    rows = bench.main(["--precision", "auto", "--quick", "--out", str(out)])
    assert json.loads(out.read_text())["rows"] == json.loads(json.dumps(rows)) and len(rows) == 1
    row = rows[0]
    ups = {"32-true": row["fp32_updates_per_s"], "bf16-mixed": row["bf16_updates_per_s"]}
    assert all(value > 0 for value in ups.values()) and row["auto_pick"] in ups
    assert row["faster"] == max(ups, key=ups.__getitem__)
    assert row["auto_vs_faster"] == pytest.approx(ups[row["auto_pick"]] / ups[row["faster"]])
    assert row["auto_pick"] == lp.choose({"32-true": row["auto_fp32_ms"], "bf16-mixed": row["auto_bf16_ms"]})[0]


def test_precision_benchmark_reports_autos_pick_against_the_faster(monkeypatch, tmp_path):
    """Given timings: auto's short measurement picks 32-true, the Trainer runs say bf16-mixed
    is twice as fast, so the row says auto reached 0.5 of the faster."""
    from actorq.bench import learner as bench

    monkeypatch.setattr(bench, "time_updates", lambda learner: {"32-true": 10.0, "bf16-mixed": 20.0})
    monkeypatch.setattr(bench, "lightning_updates_per_s",
                        lambda learner, experience, precision: {"32-true": 100.0, "bf16-mixed": 200.0}[precision])
    (row,) = bench.main(["--precision", "auto", "--quick", "--out", ""])
    assert (row["auto_pick"], row["faster"], row["auto_vs_faster"]) == ("32-true", "bf16-mixed", 0.5)
    assert (row["fp32_updates_per_s"], row["bf16_updates_per_s"]) == (100.0, 200.0)


def test_a_cache_entry_without_both_timings_is_measured_again(given):
    calls = given({"32-true": 30.0, "bf16-mixed": 10.0})
    learner = td3()
    lp.cache_path().parent.mkdir(parents=True)
    lp.cache_path().write_text(json.dumps({lp.cache_key(learner, "cpu"): {"32-true": 30.0}}))
    assert lp.resolve_learner_precision("auto", learner, accelerator="cpu").timings_ms["bf16-mixed"] == 10.0
    assert len(calls) == 1


@pytest.mark.parametrize(("timings", "picked", "channels_last"), [
    ({"32-true": 200.0, "bf16-mixed": 110.0, "32-true channels-last": 150.0, "bf16-mixed channels-last": 108.0},
     "bf16-mixed", False),  # Nature-CNN here: channels-last gains nothing at bf16
    ({"32-true": 1900.0, "bf16-mixed": 1080.0, "32-true channels-last": 1200.0, "bf16-mixed channels-last": 630.0},
     "bf16-mixed", True),  # IMPALA-CNN here
    ({"32-true": 200.0, "bf16-mixed": 180.0, "32-true channels-last": 120.0, "bf16-mixed channels-last": 170.0},
     "32-true", True),  # fp32 channels-last beats bf16 either way
])
def test_auto_picks_the_layout_of_a_conv_learner_with_its_precision(given, timings, picked, channels_last):
    given(timings)
    decided = lp.resolve_learner_precision("auto", learner_of("ppo_frames"), accelerator="cpu")
    assert (decided.precision, decided.channels_last) == (picked, channels_last)
    assert f"channels-last {'kept' if channels_last else 'not kept'}" in decided.reason
    learner = learner_of("ppo_frames")
    decided.lay_out(learner)
    assert uses_channels_last(learner) == channels_last


def test_a_conv_learner_is_timed_at_both_layouts_and_left_as_it_was():
    learner = learner_of("ppo_frames")
    assert lp.candidates(learner) == ("32-true", "bf16-mixed", "32-true channels-last", "bf16-mixed channels-last")
    timings = lp.time_updates(learner, lp.candidates(learner), rounds=1, max_rounds=1)
    assert set(timings) == set(lp.candidates(learner)) and all(ms > 0 for ms in timings.values())
    assert has_layout_choice(learner) and not uses_channels_last(learner)
    assert lp.candidates(td3()) == ("32-true", "bf16-mixed")


def ppo_in_parts(micro_batch_size="auto") -> PPO:
    return PPO(EnvSpec(obs_dim=4, discrete=True, num_actions=2), hidden=(16,), minibatch_size=128,
               micro_batch_size=micro_batch_size)


@pytest.mark.parametrize(("timings", "picked"), [
    ({"32-true": 10.0, "32-true micro=64": 7.0, "32-true micro=32": 8.0}, 64),
    ({"32-true": 10.0, "32-true micro=64": 9.8, "32-true micro=32": 9.9}, 128),  # within the margin: whole
])
def test_micro_batches_auto_runs_the_faster_part_at_the_precision_decided(given, timings, picked):
    calls = given(timings)
    decided = lp.resolve_learner_precision("32-true", ppo_in_parts(), accelerator="cpu")
    assert decided.micro_batch_size == picked and f"micro-batches of {picked} rows" in decided.reason
    assert calls == ["cpu"] and {name: decided.timings_ms[name] for name in timings} == timings
    learner = ppo_in_parts()
    decided.lay_out(learner)
    assert learner.micro_batch_size == picked
    given(timings)
    assert lp.resolve_learner_precision("32-true", ppo_in_parts(None), accelerator="cpu").micro_batch_size is None
    assert lp.resolve_learner_precision("32-true", ppo_in_parts(32), accelerator="cpu").micro_batch_size is None


def test_micro_batch_candidates_are_timed_in_parts_and_the_learner_left_as_it_was():
    learner = ppo_in_parts()
    names = ("32-true", "32-true micro=64", "bf16-mixed micro=32")
    timings = lp.time_updates(learner, names, rounds=1, max_rounds=1)
    assert set(timings) == set(names) and all(ms > 0 for ms in timings.values())
    assert learner.micro_batch_size == "auto"
    clone = lp._detached_copy(learner, "cpu", *lp.candidate("32-true micro=64")[1:])
    assert clone.micro_batch_size == 64 and lp._detached_copy(learner, "cpu").micro_batch_size is None
    assert lp._detached_copy(ppo_in_parts(32), "cpu").micro_batch_size == 32  # a configured size is timed as it is
