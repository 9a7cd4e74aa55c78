"""Channels-last convolutions: the layout changes where activations lie, not what a trunk
computes, and the measurement leaves the faster one set."""

from __future__ import annotations

import pytest
import torch

from actorq.algos.conv import make_trunk
from actorq.util.memory_format import channels_last_faster, has_layout_choice, set_channels_last, uses_channels_last


@pytest.mark.parametrize("name", ["nature", "impala"])
def test_channels_last_lays_the_activations_out_and_computes_the_same(name):
    torch.manual_seed(0)
    trunk = make_trunk(name, (4, 84, 84)).eval()
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    layouts = []
    trunk.convs[0].register_forward_hook(
        lambda module, inputs, output: layouts.append(output.is_contiguous(memory_format=torch.channels_last)))
    with torch.no_grad():
        default = trunk(frames)
        last = set_channels_last(trunk, True)(frames)
    assert layouts == [False, True]
    assert torch.allclose(default, last, atol=1e-5)


def test_the_measurement_times_both_layouts_and_leaves_the_faster_set():
    trunk = make_trunk("nature", (4, 84, 84)).eval()
    assert has_layout_choice(trunk) and not uses_channels_last(trunk)
    faster, ms = channels_last_faster(trunk, torch.zeros(2, 4, 84, 84, dtype=torch.uint8), repeats=1, rounds=1)
    assert set(ms) == {"default", "channels_last"} and all(value > 0 for value in ms.values())
    assert uses_channels_last(trunk) == faster == (ms["channels_last"] <= 0.95 * ms["default"])
    assert not has_layout_choice(torch.nn.Linear(2, 2))
