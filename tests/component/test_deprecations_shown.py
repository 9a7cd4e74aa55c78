"""actorq hides none of torch's deprecations: an int8 copy built on torch.ao's modules, and a
policy written as TorchScript, warn as torch makes them warn. Played in a fresh interpreter
(pytest's own warning filters would otherwise stand in the way), every warning shown from the
start: a filter actorq added on import, or around its calls, would come first and hide one."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from actorq.quant import _ao

pytestmark = pytest.mark.skipif(not _ao.AVAILABLE, reason="this torch has no torch.ao quantized modules")

BUILD_AND_SCRIPT = textwrap.dedent("""
    import sys, tempfile, warnings
    warnings.simplefilter("always")  # first: a filter actorq added later would come before it
    import torch
    from actorq.algos.networks import DeterministicActor
    from actorq.envs import EnvSpec
    from actorq.quant import QuantSpec, QuantizedNetwork
    from actorq.tools.standalone import export

    spec = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)
    actor = DeterministicActor(spec, (32, 32, 32)).eval()
    with warnings.catch_warnings(record=True) as caught:
        copy = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode=sys.argv[1], engine="x86"),
                                             torch.randn(64, 17))
        export(copy, tempfile.mkdtemp() + "/policy.pt")  # TorchScript
    for warning in caught:
        print(type(warning.message).__name__, str(warning.message)[:60].replace("\\n", " "))
""")



@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_torch_warns_of_its_deprecated_quantization_and_torchscript_through_actorq(mode):
    result = subprocess.run([sys.executable, "-c", BUILD_AND_SCRIPT, mode], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "UserWarning torch.quantize_per_tensor, torch.quantize_per_channel" in result.stdout, result.stdout
    assert "DeprecationWarning `torch.jit.script` is deprecated" in result.stdout, result.stdout
