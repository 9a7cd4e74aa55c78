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
    expected = [("int8 static (x86)", bits_8)]
    if trunk == "impala":
        expected.append(("int8 static, all int8 (x86)", f"{bits_8} quant.format=int8_static"))
    assert [(precision, overrides) for precision, _, overrides, _, _ in copies] == expected
    fp32_convs = [sum(type(module) is nn.Conv2d for module in copy.modules()) for *_, copy, _ in copies]
    assert fp32_convs == ([1, 0] if trunk == "impala" else [0])
    assert all(ms > 0 for *_, ms in copies)
