"""QuantSpec: every valid combination builds, every invalid one fails with one clear line."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from actorq.util.errors import ConfigError
from actorq.quant import QuantizedNetwork, QuantSpec


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bits": 32},
        {"bits": 16},
        {"bits": 8, "mode": "static"},
        {"bits": 8, "mode": "dynamic"},
        {"bits": 8, "mode": "static", "observer": "fixed"},
        {"bits": 8, "calibration": "histogram", "granularity": "per_tensor"},
        {"bits": 8, "calibration": "moving_average"},
        *({"bits": b, "mode": "dynamic"} for b in range(2, 8)),
        {"bits": "auto"},
    ],
)
def test_valid_specs_build(kwargs):
    assert QuantSpec(**kwargs).describe()


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"bits": 1}, "32 (fp32), 16 (bf16), 8 (int8), 2..7 (simulated) or 'auto'"),
        ({"bits": 64}, "quant.bits must be"),
        ({"bits": True}, "quant.bits must be"),
        ({"bits": "eight"}, "quant.bits must be"),
        ({"bits": 4, "mode": "static"}, "needs quant.mode=dynamic"),
        ({"mode": "qat"}, "quant.mode must be one of static, dynamic"),
        ({"observer": "percentile"}, "quant.observer must be one of learned, fixed"),
        ({"calibration": "kl"}, "quant.calibration must be one of minmax, moving_average, histogram"),
        ({"granularity": "per_row"}, "quant.granularity must be one of per_tensor, per_channel"),
        ({"input_range": (5.0, -5.0)}, "low < high"),
        ({"input_range": (1.0, 2.0, 3.0)}, "[low, high]"),
        ({"activation_max": 0.0}, "quant.activation_max must be positive"),
        ({"calibration_samples": 0}, "quant.calibration_samples must be positive"),
        ({"auto_tolerance": -1.0}, "quant.auto_tolerance must be >= 0"),
        ({"max_kl": 0.0}, "quant.max_kl must be positive, got 0"),
        ({"fallback_bits": (32, 16)}, "quant.fallback_bits must rise, each once"),
        ({"fallback_bits": (32, 32)}, "quant.fallback_bits must rise, each once"),
        ({"fallback_bits": (4,)}, "quant.fallback_bits takes 8, 16 and 32"),
    ],
)
def test_invalid_specs_fail_with_one_clear_line(kwargs, says):
    with pytest.raises(ConfigError) as error:
        QuantSpec(**kwargs)
    message = str(error.value)
    assert says in message
    assert "\n" not in message


def test_hydra_lists_become_tuples():
    spec = QuantSpec(input_range=OmegaConf.create([-3, 3]), fallback_bits=OmegaConf.create([16, 32]))
    assert spec.input_range == (-3.0, 3.0) and spec.fallback_bits == (16, 32)
    assert hash(spec) == hash(QuantSpec(input_range=(-3.0, 3.0), fallback_bits=(16, 32)))


def test_properties_say_what_a_broadcast_needs():
    assert QuantSpec(bits=8, mode="static").needs_calibration
    assert not QuantSpec(bits=8, mode="static", observer="fixed").needs_calibration
    assert not QuantSpec(bits=8, mode="dynamic").needs_calibration
    assert not QuantSpec(bits=32).needs_calibration
    assert QuantSpec(bits=4, mode="dynamic").describe() == "4-bit simulated per_channel"


def test_auto_must_be_resolved_before_building_actors():
    with pytest.raises(ConfigError, match="select_precision"):
        QuantizedNetwork((3, 8, 1), QuantSpec(bits="auto"))
