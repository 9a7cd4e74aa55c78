"""``bench fleet``'s int8 copies: which copy each row times and the overrides that give a run it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actorq.algos.conv import PixelPolicy
from actorq.bench.fleet import int8_copies, run_overrides


@pytest.mark.parametrize("trunk", ["nature", "impala"])
def test_a_trunk_with_an_fp32_first_stage_also_gets_its_all_int8_copy_with_the_override_for_it(trunk):
    if "x86" not in torch.backends.quantized.supported_engines:
        pytest.skip("no x86 int8 engine in this torch build")
    torch.manual_seed(0)
    policy = PixelPolicy(trunk, 4, num_actions=4).eval()
    frames = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    copies = list(int8_copies(policy, frames, ["x86"], "minmax", repeats=1))
    bits_8 = run_overrides("x86", "minmax")
    from actorq.quant import onednn
    if onednn.available():  # a convolutional trunk's default is plain: x86 is named
        assert bits_8 == "quant.bits=8 quant.engine=x86"
    expected = [("int8 static (x86)", bits_8)]
    if trunk == "impala":
        expected.append(("int8 static, all int8 (x86)", f"{bits_8} quant.format=int8_static"))
    assert [(precision, overrides) for precision, _, overrides, _, _ in copies] == expected
    fp32_convs = [sum(type(module) is nn.Conv2d for module in copy.modules()) for *_, copy, _ in copies]
    assert fp32_convs == ([1, 0] if trunk == "impala" else [0])
    assert all(ms > 0 for *_, ms in copies)


def test_every_round_times_each_row_once_in_turn_after_a_warm_up_round():
    from actorq.bench.fleet import interleaved_medians

    calls, values = [], {"a": iter([9.0, 1.0, 3.0, 2.0]), "b": iter([9.0, 5.0, 4.0, 6.0])}

    def timer(name):
        def timed():
            calls.append(name)
            return next(values[name])
        return timed

    medians = interleaved_medians({"a": timer("a"), "b": timer("b")}, repeats=3)
    assert calls == ["a", "b"] * 4  # a slower spell of the machine falls on both rows alike
    assert medians == {"a": 2.0, "b": 5.0}  # the warm-up's 9.0 is not counted


@pytest.mark.parametrize("trunk", ["nature", "impala"])
def test_the_plain_engine_gets_one_copy_on_plain_int8_convolutions_the_default_of_bits_8(trunk):
    from actorq.bench.fleet import copy_bytes
    from actorq.quant import QuantSpec, onednn, payload_nbytes, quantize

    if not onednn.available():
        pytest.skip("no oneDNN int8 kernels in this torch build")
    torch.manual_seed(0)
    policy = PixelPolicy(trunk, 4, num_actions=4).eval()
    frames = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    (precision, engine, overrides, copy, ms), = int8_copies(policy, frames, ["plain"], "minmax", repeats=1)
    assert (precision, overrides) == ("int8 static (plain)", "quant.bits=8") and ms > 0
    assert not any(type(module) is nn.Conv2d for module in copy.modules())  # the first stage too
    assert any(isinstance(module, onednn.Int8Conv2d) for module in copy.modules())
    payload = quantize(policy, QuantSpec(bits=8, mode="static"), frames)  # quant.engine=null: plain
    assert copy_bytes(copy) == pytest.approx(payload_nbytes(payload), rel=0.02)
