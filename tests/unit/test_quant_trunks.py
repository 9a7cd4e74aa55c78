"""Any nn.Sequential of Linear -> [LayerNorm] -> [activation] quantizes, at every precision
that can run it; int8 static refuses what it cannot run, naming the module."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actorq.util.errors import ConfigError
from actorq.algos.networks import mlp
from actorq.quant import (
    LayerLayout,
    QuantizedNetwork,
    QuantSpec,
    TrunkLayout,
    action_error,
    quantize,
    reference_module,
)
from tests.helpers import assert_computes_the_reference

OBS_DIM, ACTION_DIM = 17, 6


def tanh_trunk() -> nn.Sequential:
    """Tanh everywhere, the last Linear included."""
    return nn.Sequential(
        nn.Linear(OBS_DIM, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, ACTION_DIM), nn.Tanh()
    )


def some_norms_trunk() -> nn.Sequential:
    """LayerNorm after some Linears only (the last one included), ReLU after some only."""
    return nn.Sequential(
        nn.Linear(OBS_DIM, 64), nn.LayerNorm(64), nn.ReLU(),
        nn.Linear(64, 64), nn.ReLU(),
        nn.Linear(64, 48), nn.LayerNorm(48),
        nn.Linear(48, ACTION_DIM), nn.LayerNorm(ACTION_DIM),
    )


def relu_last_trunk() -> nn.Sequential:
    """A Linear with nothing after it mid-trunk, a ReLU after the last Linear, a bias-less Linear."""
    return nn.Sequential(
        nn.Linear(OBS_DIM, 64), nn.ReLU(), nn.Linear(64, 64, bias=False), nn.Linear(64, ACTION_DIM), nn.ReLU()
    )


class Policy(nn.Module):
    def __init__(self, trunk: nn.Sequential):
        super().__init__()
        self.trunk = trunk
        self.head = nn.Tanh()

    def forward(self, x):
        return self.head(self.trunk(x))


SPECS = {
    "fp32": (QuantSpec(bits=32), 0.0),
    "bf16": (QuantSpec(bits=16), 0.02),
    "int8_static": (QuantSpec(bits=8, mode="static"), 0.05),
    "int8_static_all_layers": (QuantSpec(bits=8, mode="static", format="int8_static"), 0.05),
    # Fixed ranges are a coarse grid for unit-variance LayerNorm outputs: a wide activation_max
    # costs accuracy here (0.16 at 8.0 on the some_norms trunk).
    "int8_static_fixed": (QuantSpec(bits=8, mode="static", observer="fixed", input_range=(-4.0, 4.0),
                                    activation_max=4.0), 0.1),
    "int8_dynamic": (QuantSpec(bits=8, mode="dynamic"), 0.03),
    "int8_dynamic_per_tensor": (QuantSpec(bits=8, mode="dynamic", granularity="per_tensor"), 0.03),
    "int8_static_plain": (QuantSpec(bits=8, mode="static", engine="plain"), 0.05),
    "int8_dynamic_plain": (QuantSpec(bits=8, mode="dynamic", engine="plain"), 0.03),
    "7bit": (QuantSpec(bits=7, mode="dynamic"), 0.03),
    "4bit": (QuantSpec(bits=4, mode="dynamic"), 0.15),
}
TRUNKS = {"tanh": tanh_trunk, "some_norms": some_norms_trunk, "relu_last": relu_last_trunk}
STATIC_RUNS = {"some_norms", "relu_last"}  # int8 static has no Tanh


@pytest.fixture(scope="module")
def observations() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(512, OBS_DIM)


def _policy(trunk_name: str) -> Policy:
    torch.manual_seed(0)
    return Policy(TRUNKS[trunk_name]()).eval()


@pytest.mark.parametrize("trunk_name", list(TRUNKS))
@pytest.mark.parametrize("spec_name", list(SPECS))
def test_every_codec_that_runs_a_trunk_stays_close_to_fp32(trunk_name, spec_name, observations):
    spec, tolerance = SPECS[spec_name]
    if trunk_name != "some_norms":
        tolerance /= 5  # without LayerNorms rounding errors do not pile up (measured: 3x below this)
    policy = _policy(trunk_name)
    if spec.is_static and trunk_name not in STATIC_RUNS:
        pytest.skip("int8 static refuses Tanh (tested below)")
    quantized = QuantizedNetwork.from_network(policy, spec, calibration=observations)
    assert quantized.layout == TrunkLayout.from_trunk(policy.trunk)
    error = action_error(policy, quantized, observations)
    assert error <= tolerance, f"{spec.describe()} on {trunk_name}: {error:.4f}"
    if spec.bits != 32:
        assert error > 0  # the payload really is at reduced precision
    if spec.codec.int8_kernels:  # the worker computes what torch.ao converted, but for rounding ties
        assert_computes_the_reference(quantized(observations), reference_module(policy, spec, observations)(observations))


@pytest.mark.parametrize("observer", ["learned", "fixed"])
@pytest.mark.parametrize(("format", "index"), [(None, 3), ("int8_static", 1)])
def test_int8_static_refuses_tanh_naming_the_module(observer, format, index, observations):
    """The default keeps the first and last Linear (and what follows them) in fp32, so its
    first refusal is the Tanh after the second Linear; every layer int8: the first Tanh."""
    policy = _policy("tanh")
    spec = QuantSpec(bits=8, mode="static", observer=observer, format=format)
    with pytest.raises(ConfigError, match=rf"quant.mode=static .* trunk\[{index}\] is Tanh"):
        quantize(policy, spec, calibration=observations)
    with pytest.raises(ConfigError, match=rf"trunk\[{index}\] is Tanh"):
        QuantizedNetwork.template_for(policy, spec)
    with pytest.raises(ConfigError, match=rf"trunk\[{index}\] is Tanh"):
        reference_module(policy, spec, observations)


@pytest.mark.parametrize("trunk_name", list(TRUNKS))
def test_layout_reads_every_layer_and_rebuilds_the_same_shape(trunk_name):
    trunk = TRUNKS[trunk_name]()
    layout = TrunkLayout.from_trunk(trunk)
    assert [type(m) for m in layout.build_float_trunk()] == [type(m) for m in trunk]
    assert TrunkLayout.from_trunk(layout.build_float_trunk()) == layout
    for k in range(layout.num_layers):
        assert layout.linear(trunk, k) is [m for m in trunk if isinstance(m, nn.Linear)][k]


def test_some_norms_layout_in_detail():
    layout = TrunkLayout.from_trunk(some_norms_trunk())
    assert layout.layers == (
        LayerLayout(OBS_DIM, 64, norm=True, activation="relu"),
        LayerLayout(64, 64, activation="relu"),
        LayerLayout(64, 48, norm=True),
        LayerLayout(48, ACTION_DIM, norm=True),
    )
    assert layout.sizes == (OBS_DIM, 64, 64, 48, ACTION_DIM) and layout.layer_norm
    assert [layout.module_index(k) for k in range(4)] == [0, 3, 5, 7]


@pytest.mark.parametrize("layer_norm", [False, True])
def test_sizes_and_layer_norm_still_describe_an_mlp(layer_norm):
    layout = TrunkLayout(sizes=(OBS_DIM, 32, 32, ACTION_DIM), layer_norm=layer_norm)
    assert layout == TrunkLayout.from_trunk(mlp(OBS_DIM, (32, 32), ACTION_DIM, layer_norm=layer_norm))
    assert layout.sizes == (OBS_DIM, 32, 32, ACTION_DIM) and layout.layer_norm == layer_norm
    assert [layout.has_relu(k) for k in range(3)] == [True, True, False]


@pytest.mark.parametrize(
    ("modules", "says"),
    [
        ([nn.ReLU(), nn.Linear(3, 1)], r"trunk\[0\] is ReLU where a Linear is expected"),
        ([nn.Linear(3, 4), nn.ReLU(), nn.LayerNorm(4), nn.Linear(4, 1)], r"trunk\[2\] is LayerNorm"),
        ([nn.Linear(3, 4), nn.LeakyReLU(), nn.Linear(4, 1)], r"trunk\[1\] is LeakyReLU"),
        ([nn.Linear(3, 4), nn.LayerNorm(4, elementwise_affine=False), nn.Linear(4, 1)], r"trunk\[1\] is a LayerNorm"),
        ([nn.Linear(3, 4), nn.Linear(5, 1)], "outputs 4 features but layer 1 takes 5"),
        ([nn.Tanh()], "no nn.Linear"),
    ],
)
def test_unsupported_trunks_fail_with_one_clear_line(modules, says):
    with pytest.raises(ConfigError, match=says) as error:
        TrunkLayout.from_trunk(nn.Sequential(*modules))
    assert "\n" not in str(error.value)


def test_a_template_from_a_layout_accepts_the_learners_payload(observations):
    policy = _policy("some_norms")
    spec = QuantSpec(bits=8, mode="static")
    template = QuantizedNetwork(TrunkLayout.from_trunk(policy.trunk), spec, head=nn.Tanh())
    template.load_payload(quantize(policy, spec, calibration=observations))
    torch.testing.assert_close(
        template(observations), QuantizedNetwork.from_network(policy, spec, observations)(observations), atol=0, rtol=0
    )


@pytest.mark.parametrize("trunk_name", list(TRUNKS))
@pytest.mark.parametrize("spec_name", list(SPECS))
def test_the_actors_direct_calls_compute_what_the_modules_compute(trunk_name, spec_name, observations):
    """``forward`` runs the trunk's modules without ``nn.Module.__call__`` (an actor's
    per-step cost); it must give exactly the built modules' output, batched or not."""
    spec, _ = SPECS[spec_name]
    if spec.is_static and trunk_name not in STATIC_RUNS:
        pytest.skip("int8 static refuses Tanh")
    quantized = QuantizedNetwork.from_network(_policy(trunk_name), spec, calibration=observations)
    modules = nn.Sequential(quantized.executable_trunk(), quantized.head)
    assert torch.equal(quantized(observations), modules(observations))
    assert torch.equal(quantized(observations[0]), modules(observations[:1])[0])
