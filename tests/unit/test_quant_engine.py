"""The int8 kernel library (``quant.engine``) the actors' weights are packed for."""

import pytest
import torch
import torch.ao.nn.quantized as nnq

from actorq.util.errors import ConfigError
from actorq.algos.networks import DeterministicActor
from actorq.quant import QuantizedNetwork, QuantSpec, _ao
from actorq.quant.auto import candidate_specs
from tests.helpers import CONTINUOUS

pytestmark = pytest.mark.skipif("onednn" not in _ao.ENGINES, reason="this torch build has no onednn engine")


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_weights_are_packed_for_the_spec_engine_and_run_under_another(mode, monkeypatch):
    torch.manual_seed(0)
    actor = DeterministicActor(CONTINUOUS, (64, 64))
    observations = torch.randn(256, 3)
    engines_seen = []
    pack = nnq.Linear.set_weight_bias if mode == "static" else torch.ao.nn.quantized.dynamic.Linear.set_weight_bias

    def recording(self, weight, bias):
        engines_seen.append(torch.backends.quantized.engine)
        return pack(self, weight, bias)

    target = nnq.Linear if mode == "static" else torch.ao.nn.quantized.dynamic.Linear
    monkeypatch.setattr(target, "set_weight_bias", recording)
    default = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode=mode, engine=_ao.DEFAULT_ENGINE), observations)
    onednn = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode=mode, engine="onednn"), observations)
    before = torch.backends.quantized.engine
    actions_default, actions_onednn = default(observations), onednn(observations)
    assert torch.backends.quantized.engine == before  # the process-wide engine is restored
    # The actors' modules are built (packed) at the first forward: the default one, then onednn
    # (the Linear between the first and the last one, which stay fp32).
    int8_layers = 1
    assert engines_seen[-2 * int8_layers:] == [_ao.DEFAULT_ENGINE] * int8_layers + ["onednn"] * int8_layers
    assert (actions_onednn - actions_default).abs().max() < 0.02  # same codes, other kernels
    assert onednn.quant.describe().endswith("onednn") and not default.quant.describe().endswith("onednn")


def test_unknown_engine_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="quant.engine must be one of .*onednn"):
        QuantSpec(bits=8, engine="tpu")


def test_auto_times_int8_on_each_engine():
    names = candidate_specs(QuantSpec(bits="auto"))
    static = "int8_static_fp32_ends"
    assert {static, "int8_dynamic", f"{static}_onednn", "int8_dynamic_onednn"} <= set(names)
    assert names[f"{static}_onednn"].engine == "onednn" and names[static].engine is None
