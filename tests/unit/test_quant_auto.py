"""bits=auto: the fastest faithful precision, never slower than fp32."""

from __future__ import annotations

import logging

import pytest
import torch

from actorq.envs import EnvSpec
from actorq.algos.networks import DeterministicActor
from actorq.quant import QuantizedNetwork, QuantSpec, _ao, choose, onednn, resolve_precision, select_precision
from actorq.quant.auto import candidate_specs

SPEC = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)
NO_ERROR = {"fp32": 0.0, "bf16": 0.0, "int8_static": 0.0, "int8_dynamic": 0.0}


def test_picks_the_fastest_candidate():
    timings = {"fp32": 100.0, "bf16": 60.0, "int8_static": 20.0, "int8_dynamic": 25.0}
    assert choose(timings, NO_ERROR, tolerance=0.05) == "int8_static"


def test_skips_candidates_outside_the_tolerance():
    timings = {"fp32": 100.0, "bf16": 60.0, "int8_static": 20.0, "int8_dynamic": 25.0}
    errors = {**NO_ERROR, "int8_static": 0.2, "int8_dynamic": 0.06}
    assert choose(timings, errors, tolerance=0.05) == "bf16"


@pytest.mark.parametrize(
    "timings",
    [
        {"fp32": 40.0, "bf16": 90.0, "int8_static": 70.0, "int8_dynamic": 75.0},  # narrow net, batch 1
        {"fp32": 40.0, "bf16": 41.0, "int8_static": 39.0, "int8_dynamic": 45.0},  # within noise
    ],
)
def test_keeps_fp32_unless_something_is_clearly_faster(timings):
    assert choose(timings, NO_ERROR, tolerance=0.05, margin=0.05) == "fp32"


def test_fp32_even_when_nothing_is_faithful():
    timings = {"fp32": 100.0, "bf16": 60.0, "int8_static": 20.0}
    errors = {"fp32": 0.0, "bf16": 1.0, "int8_static": 1.0}
    assert choose(timings, errors, tolerance=0.05) == "fp32"


def test_candidates_keep_the_configured_observer_and_granularity():
    spec = QuantSpec(bits="auto", observer="fixed", granularity="per_tensor")
    candidates = candidate_specs(spec)
    assert candidates["fp32"].bits == 32 and candidates["bf16"].bits == 16
    assert candidates["int8_static_fp32_ends"].observer == "fixed"
    assert candidates["int8_dynamic"].granularity == "per_tensor"


def test_concrete_specs_pass_through_unchanged():
    spec = QuantSpec(bits=8, mode="dynamic")
    assert resolve_precision(torch.nn.Identity(), spec, batch_size=4) == (spec, None)


# What a 2048-wide actor measured at batch 1 and at batch 16 (one thread, AMD EPYC with
# avx512_vnni, docs/measured/quantization.md): the int8 codecs 8-14x faster than fp32. Whether int8 is
# really faster on a given CPU is measured by `actorq bench inference`, not here.
WIDE_BATCH_ONE_US = {"fp32": 1870.0, "bf16": 900.0, "int8_static_fp32_ends": 203.0, "int8_dynamic": 229.0,
                     "int8_static_fp32_ends_onednn": 240.0, "int8_dynamic_onednn": 260.0,
                     "int8_static_fp32_ends_plain": 250.0, "int8_dynamic_plain": 270.0}
WIDE_BATCH_16_US = {"fp32": 11681.0, "bf16": 6000.0, "int8_static_fp32_ends": 840.0, "int8_dynamic": 935.0,
                    "int8_static_fp32_ends_onednn": 990.0, "int8_dynamic_onednn": 1100.0,
                    "int8_static_fp32_ends_plain": 1000.0, "int8_dynamic_plain": 1150.0}


def test_wide_actor_at_batch_one_gets_the_int8_its_timings_favour(monkeypatch):
    torch.manual_seed(0)
    actor = DeterministicActor(SPEC, (2048, 2048, 2048)).eval()
    observations = torch.randn(256, SPEC.obs_dim)
    given_timings(monkeypatch, WIDE_BATCH_ONE_US)
    choice = select_precision(actor, QuantSpec(bits="auto"), batch_size=1, observations=observations)
    assert choice.name == "int8_static_fp32_ends", choice.timings_us
    assert choice.spec.bits == 8 and choice.spec.codec.int8_kernels
    assert choice.action_errors[choice.name] <= 0.05  # measured on this actor: faithful, not given
    metrics = choice.metrics()
    assert metrics["quant/auto_speedup"] == pytest.approx(1870.0 / 203.0) and "quant/auto_us/bf16" in metrics


def test_width_1024_batch_16_picks_int8_and_returns_that_candidates_network():
    """What auto reports is checked against what it returns: the spec of the reported name,
    whose codec runs the hidden layers in int8."""
    torch.manual_seed(0)
    actor = DeterministicActor(SPEC, (1024, 1024, 1024)).eval()
    observations = torch.randn(256, SPEC.obs_dim)
    spec = QuantSpec(bits="auto")
    with pytest.MonkeyPatch.context() as monkeypatch:
        given_timings(monkeypatch, WIDE_BATCH_16_US)
        choice = select_precision(actor, spec, batch_size=16, observations=observations)
    assert set(choice.timings_us) == set(candidate_specs(spec))
    assert choice.name == "int8_static_fp32_ends", choice.timings_us
    # The returned spec is the candidate of the reported name, and its codec formats exactly that.
    assert choice.spec == candidate_specs(spec)[choice.name]
    assert choice.spec.codec.name == choice.name and choice.spec.codec.int8_kernels
    picked = QuantizedNetwork.from_network(actor, choice.spec, calibration=observations)
    # The hidden 1024x1024 layer runs in int8 (the default static recipe keeps only the first
    # and the last Linear in fp32).
    assert picked.payload()["l1_weight"].dtype == torch.int8


def test_auto_picks_plain_int8_tensors_where_their_timings_win_and_the_actors_run_them(monkeypatch):
    torch.manual_seed(0)
    actor = DeterministicActor(SPEC, (1024, 1024, 1024)).eval()
    observations = torch.randn(256, SPEC.obs_dim)
    given_timings(monkeypatch, {**WIDE_BATCH_16_US, "int8_static_fp32_ends_plain": 600.0})
    choice = select_precision(actor, QuantSpec(bits="auto"), batch_size=16, observations=observations)
    assert choice.name == "int8_static_fp32_ends_plain" and choice.spec.engine == "plain"
    picked = QuantizedNetwork.from_network(actor, choice.spec, calibration=observations)
    assert any(isinstance(module, onednn.Int8Linear) for module in picked.executable_trunk().modules())


def given_timings(monkeypatch, timings_us: dict[str, float]) -> None:
    """``select_precision`` decides on these timings instead of measuring (no clock race)."""
    from actorq.quant import auto

    def measured(networks, batch, iterations=300, rounds=3):
        assert set(networks) == set(timings_us)  # every candidate would have been timed
        return dict(timings_us)

    monkeypatch.setattr(auto, "measure_timings", measured)


# What a 32-wide actor at batch 1 measured on an idle CPU: the int8 and bf16 overheads
# dominate (2-4x slower than fp32).
NARROW_BATCH_ONE_US = {"fp32": 40.0, "bf16": 90.0, "int8_static_fp32_ends": 150.0, "int8_dynamic": 120.0,
                       "int8_static_fp32_ends_onednn": 160.0, "int8_dynamic_onednn": 130.0,
                       "int8_static_fp32_ends_plain": 170.0, "int8_dynamic_plain": 140.0}


def narrow_actor():
    torch.manual_seed(0)
    return DeterministicActor(SPEC, (32, 32)).eval()


def test_narrow_actor_at_batch_one_keeps_fp32(monkeypatch):
    """Given the timings of a narrow actor at batch 1, every candidate slower than fp32, the
    choice is fp32, and its spec, codec and reported speedup say so."""
    spec = QuantSpec(bits="auto")
    given_timings(monkeypatch, {name: NARROW_BATCH_ONE_US[name] for name in candidate_specs(spec)})
    choice = select_precision(narrow_actor(), spec, batch_size=1)
    assert choice.name == "fp32"
    assert choice.spec.bits == 32 and choice.spec.codec.name == "fp32"
    assert choice.metrics()["quant/auto_speedup"] == 1.0
    assert choice.timings_us["bf16"] == 90.0


@pytest.mark.parametrize(("bf16_us", "picked", "speedup"), [(36.0, "bf16", 40.0 / 36.0), (39.0, "fp32", 1.0)])
def test_narrow_actor_takes_bf16_only_when_given_timings_make_it_clearly_faster(monkeypatch, bf16_us, picked, speedup):
    """The same network with bf16 timed 10% faster (what a loaded machine once measured) is a
    bf16 pick: what decides is the timings, so the test gives them; 2.5% faster is noise."""
    spec = QuantSpec(bits="auto")
    timings = {name: NARROW_BATCH_ONE_US[name] for name in candidate_specs(spec)}
    given_timings(monkeypatch, {**timings, "bf16": bf16_us})
    choice = select_precision(narrow_actor(), spec, batch_size=1)
    assert choice.action_errors["bf16"] <= spec.auto_tolerance  # faithful: only speed decides
    assert choice.name == picked
    assert choice.spec == candidate_specs(spec)[picked]
    assert choice.metrics()["quant/auto_speedup"] == pytest.approx(speedup)


def test_inference_benchmark_quick_run_writes_its_table(tmp_path, capsys):
    import json

    from actorq.bench.inference import main

    out = tmp_path / "inference.json"
    rows = main(["--quick", "--widths", "32", "--batches", "1", "4", "--iterations", "10", "--out", str(out)])
    assert [(row["width"], row["batch"]) for row in rows] == [(32, 1), (32, 4)]
    written = json.loads(out.read_text())["rows"]
    assert written == rows
    assert {"fp32_us", "static_us", "dynamic_us", "bf16_us", "auto_us", "auto_pick", "auto_x"} <= set(rows[0])
    assert "auto, slowest cell" in capsys.readouterr().out


def test_int4_packed_is_not_a_candidate_its_actors_compute_in_fp32():
    """Its forward is fp32's own: only timing noise could make it look faster."""
    assert not any(spec.format == "int4_packed" for spec in candidate_specs(QuantSpec(bits="auto")).values())


@pytest.mark.parametrize(("tolerance", "picked"), [(0.05, "int4_packed"), (1e-6, "fp32")])
def test_auto_times_every_codec_marked_as_a_candidate_and_keeps_only_faithful_ones(monkeypatch, tolerance, picked):
    """Candidates come from the registry: marked as one, the int4 codec is timed like the
    built-ins, picked when the given timings make it the fastest and its measured action
    error is within the tolerance, and passed over (for fp32) when it is not."""
    from actorq.quant.codecs.int4_packed import Int4Packed

    monkeypatch.setattr(Int4Packed, "auto_candidate", True)
    spec = QuantSpec(bits="auto", auto_tolerance=tolerance)
    candidates = candidate_specs(spec)
    assert candidates["int4_packed"].codec.name == "int4_packed" and "int4_packed_onednn" not in candidates
    given_timings(monkeypatch, {name: NARROW_BATCH_ONE_US.get(name, 20.0) for name in candidates})  # int4: 20 us
    choice = select_precision(narrow_actor(), spec, batch_size=1)
    assert 1e-6 < choice.action_errors["int4_packed"] <= 0.05
    assert choice.name == picked and choice.spec == candidates[picked]


# Per forward of 8 Breakout frames of IMPALA-CNN, one thread, on an AVX2-only AMD EPYC:
# every int8 copy slower than fp32 (made up, near what the x86 engine measured before the
# first stage stayed fp32), and as measured with it (onednn's copies the fastest). Named as
# where torch has oneDNN's int8 kernels: quant.engine=null runs a convolutional trunk on plain
# int8 tensors (no suffix), torch.ao's engines are named (_x86, _onednn).
CONV_SLOWER_INT8_US = {"fp32": 13937.0, "int8_static_x86": 15770.0, "int8_static_fp32_ends_x86": 14500.0,
                       "int8_static_onednn": 14100.0, "int8_static_fp32_ends_onednn": 14000.0,
                       "int8_static": 14300.0, "int8_static_fp32_ends": 14400.0}
CONV_FASTER_INT8_US = {"fp32": 13560.0, "int8_static_x86": 15560.0, "int8_static_fp32_ends_x86": 11816.0,
                       "int8_static_onednn": 11160.0, "int8_static_fp32_ends_onednn": 10056.0,
                       "int8_static": 10900.0, "int8_static_fp32_ends": 10800.0}


# Nature-CNN has no first stage kept fp32: its two int8 copies would be the same, one is timed.
NATURE_US = {"fp32": 2773.0, "int8_static_fp32_ends_x86": 1970.0, "int8_static_fp32_ends_onednn": 1997.0,
             "int8_static_fp32_ends": 2100.0}
NATURE_PLAIN_FASTEST_US = {**NATURE_US, "int8_static_fp32_ends": 1200.0}


def _without_plain(name: str) -> str | None:
    """A candidate's name where torch lacks oneDNN's int8 kernels: no plain copy, and torch.ao's
    x86 engine is the default (``None``: the plain copy, not a candidate there)."""
    if name == "fp32" or name.endswith("_onednn"):
        return name
    return name.removesuffix("_x86") if name.endswith("_x86") else None


@pytest.mark.parametrize(("trunk", "timings", "picked"), [("impala", CONV_SLOWER_INT8_US, "fp32"),
                                                          ("impala", CONV_FASTER_INT8_US, "int8_static_fp32_ends_onednn"),
                                                          ("nature", NATURE_US, "int8_static_fp32_ends_x86"),
                                                          ("nature", NATURE_PLAIN_FASTEST_US, "int8_static_fp32_ends")])
def test_a_convolutional_policy_is_offered_the_codecs_with_conv_kernels_and_picked_by_its_timings(
        monkeypatch, trunk, timings, picked):
    """A pixel policy's candidates are fp32 and, on each engine (plain int8 tensors, the
    default, and torch.ao's), the int8 copy with its first stage in fp32 and, where it has one
    (IMPALA-CNN), with every layer in int8 (no bf16 or int8 dynamic: they run MLPs only);
    made-up frames stand in when none are given, and the pick follows the timings (the action
    errors are measured; the tolerance lets them all pass). The run names the engine it picked."""
    from actorq.algos.conv import PixelPolicy
    from actorq.quant.auto import named_engine

    if "onednn" not in torch.backends.quantized.supported_engines:
        timings = {name: us for name, us in timings.items() if not name.endswith("_onednn")}
    if not onednn.available():
        timings = {_without_plain(name): us for name, us in timings.items() if _without_plain(name)}
        picked = _without_plain(picked)
    torch.manual_seed(0)
    policy = PixelPolicy(trunk, 4, num_actions=4).eval()
    given_timings(monkeypatch, timings)  # also checks that exactly these candidates were timed
    spec = QuantSpec(bits="auto", auto_tolerance=1.0, calibration_samples=32)
    choice = select_precision(policy, spec, batch_size=8, discrete=True)
    if picked not in timings:  # an engine this torch build lacks
        picked = "int8_static_fp32_ends"
    assert choice.name == picked and choice.spec.bits == (32 if picked == "fp32" else 8)
    assert set(choice.action_errors) == set(timings) and choice.action_errors["fp32"] == 0.0
    if picked != "fp32":  # the actors run plain int8 convolutions exactly where the pick says so
        copy = QuantizedNetwork.from_network(policy, choice.spec, calibration=torch.randint(
            0, 256, (16, 4, 84, 84), dtype=torch.uint8))
        plain = choice.spec.engine is None and onednn.available()
        assert any(isinstance(module, onednn.Int8Conv2d) for module in copy.executable_trunk().modules()) == plain
        assert named_engine(policy, choice.spec).engine == ("plain" if plain else choice.spec.engine)


@pytest.mark.skipif(not onednn.available(), reason="this torch build has no oneDNN int8 matmul")
@pytest.mark.parametrize(("plain_us", "legacy_us", "named"), [(100.0, 120.0, "plain"), (100.0, 97.0, "plain"),
                                                             (100.0, 80.0, _ao.DEFAULT_ENGINE)])
@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_an_mlps_int8_copy_runs_plain_unless_torch_aos_kernels_are_clearly_faster(monkeypatch, caplog, mode, plain_us,
                                                                                   legacy_us, named):
    """``quant.engine=null`` on an MLP: its copy on plain int8 tensors and on torch.ao's default
    engine are timed at the actors' batch, and plain (the kernels PyTorch keeps) is named
    unless torch.ao's is faster by the margin; the named engine is the copy the actors build."""
    from actorq.quant.auto import named_engine

    given_timings(monkeypatch, {"plain": plain_us, _ao.DEFAULT_ENGINE: legacy_us})
    caplog.set_level(logging.INFO, logger="actorq.quant.auto")
    torch.manual_seed(0)
    actor, observations = DeterministicActor(SPEC, (32, 32, 32)).eval(), torch.randn(64, SPEC.obs_dim)
    spec, choice = resolve_precision(actor, QuantSpec(bits=8, mode=mode), batch_size=4, observations=observations)
    assert choice is None and spec.engine == named
    assert f"quant.engine=null picked {named} for the MLP's int8 copy" in caplog.text  # the run's log says so
    modules = QuantizedNetwork.from_network(actor, spec, calibration=observations).executable_trunk().modules()
    plain = any(isinstance(module, (onednn.Int8Linear, onednn.DynamicInt8Linear)) for module in modules)
    assert plain == (named == "plain")
    assert named_engine(actor, QuantSpec(bits=8, mode=mode)).engine == _ao.DEFAULT_ENGINE  # no batch: no timing
    assert named_engine(actor, spec) == spec  # an engine named stays


def test_an_mlps_calibration_without_a_plain_form_keeps_torch_aos_engine(monkeypatch):
    given_timings(monkeypatch, {})  # (nothing is timed)
    actor = DeterministicActor(SPEC, (32, 32)).eval()
    spec, _ = resolve_precision(actor, QuantSpec(bits=8, mode="static", calibration="histogram"), batch_size=4,
                                observations=torch.randn(64, SPEC.obs_dim))
    assert spec.engine == _ao.DEFAULT_ENGINE


def test_an_mlp_copy_without_int8_layers_names_torch_aos_engine_without_timing(monkeypatch):
    """Two ``Linear`` layers under the fp32-ends recipe leave no int8 layer: nothing to time."""
    given_timings(monkeypatch, {})
    actor = DeterministicActor(SPEC, (32,)).eval()
    spec, _ = resolve_precision(actor, QuantSpec(bits=8, mode="dynamic"), batch_size=4)
    assert spec.engine == _ao.DEFAULT_ENGINE
