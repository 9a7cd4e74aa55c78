"""A quantized policy as one TorchScript file that plain ``torch`` loads without actorq.

Example:
    >>> import tempfile, pathlib
    >>> from actorq.envs import EnvSpec
    >>> from actorq.networks import DeterministicActor
    >>> from actorq.quant import QuantSpec
    >>> spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> actor = DeterministicActor(spec, hidden=(32, 32))
    >>> quantized = QuantizedNetwork.from_network(actor, QuantSpec(bits=8, mode="dynamic"))
    >>> path = export(quantized, pathlib.Path(tempfile.mkdtemp()) / "policy.pt")
    >>> torch.jit.load(str(path))(torch.zeros(3)).shape  # in any process, with torch only
    torch.Size([1])
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import torch
from torch import nn

from actorq.quant.network import QuantizedNetwork

METADATA_FILE = "actorq.json"


class StandalonePolicy(nn.Module):
    """``obs -> action``: the quantized trunk, the fp32 head and, for Q-networks, the argmax.

    Accepts ``[obs_dim]`` or ``[..., obs_dim]`` observations, like the actors' network.
    """

    def __init__(self, trunk: nn.Module, head: nn.Module, greedy: bool):
        super().__init__()
        self.trunk = trunk
        self.head = head
        self.greedy = greedy

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        flat = observation.reshape(-1, observation.shape[-1])
        out = self.head(self.trunk(flat))
        out = out.reshape(observation.shape[:-1] + out.shape[-1:])
        if self.greedy:
            return out.argmax(dim=-1)
        return out


def export(network: QuantizedNetwork, path: str | Path, greedy: bool = False) -> Path:
    """Writes ``network`` (trunk at its precision + head) as a TorchScript archive.

    Load it with ``torch.jit.load(path)``; the file also holds ``actorq.json`` (precision,
    codec format, widths, per-layer norms and activations), readable with
    ``torch.jit.load(path, _extra_files={"actorq.json": ""})``.

    Args:
        network: a quantized policy with a payload loaded.
        path: the file to write (parent directories are created).
        greedy: return ``argmax`` over the outputs (a Q-network's action) instead of them.

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    policy = StandalonePolicy(network.executable_trunk(), network.head, greedy).eval()
    metadata = {
        "precision": network.quant.describe(),
        "format": network.codec.name,
        "sizes": list(network.layout.sizes),
        "layer_norm": network.layout.layer_norm,
        "layers": [dataclasses.asdict(layer) for layer in network.layout.layers],
        "greedy": greedy,
        "torch": torch.__version__,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript is in maintenance mode upstream
        scripted = torch.jit.script(policy)
        torch.jit.save(scripted, str(path), _extra_files={METADATA_FILE: json.dumps(metadata)})
    return path
