"""A policy as one file that plain ``torch`` loads and runs without actorq.

:func:`export` writes a :class:`~actorq.quant.QuantizedNetwork` (trunk at its precision + fp32
head); :func:`export_checkpoint` writes the actors' policy of a run's checkpoint: the payload
they last received (an fp32 run's fp32 policy), or with ``bits`` a fresh quantization,
calibrated on the observations the run saved with the checkpoint
(:func:`actorq.tools.rebuild.calibration_set`).

The file's suffix picks the format. ``.pt2``: an ``ExportedProgram`` (``torch.export``), for a
batch ``[N, *observation_shape]``: ``torch.export.load(OUT).module()(observations) -> actions``;
an int8 copy is stored as its int8 codes and computed with plain tensor operations in fp32
(:mod:`actorq.quant.reference`: the same codes, not the int8 kernels' speed). Any other
suffix: TorchScript, which keeps the int8 kernels (``torch.jit.load(OUT)(observation) ->
action``, one observation or a batch of any shape).

Example:
    >>> import tempfile, pathlib
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import DeterministicActor
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
from pathlib import Path

import torch
from torch import nn

from actorq.quant import QuantizedNetwork, onednn
from actorq.quant.module_layout import ModuleLayout, event_dims
from actorq.quant.reference import reference_trunk
from actorq.run.resume import LAST_CHECKPOINT, read_checkpoint
from actorq.tools.rebuild import actors_network, load_learner
from actorq.util.errors import ConfigError

METADATA_FILE = "actorq.json"
EXPORTED_PROGRAM = ".pt2"
"""The suffix that writes an ``ExportedProgram`` (``torch.export``) instead of TorchScript."""


class StandalonePolicy(nn.Module):
    """``obs -> action``: the policy's observation normalizer (if it has one), the quantized
    trunk, the fp32 head and, for Q-networks and categorical policies, the argmax.

    Accepts one observation or a batch of any shape, like the actors' network: ``[obs_dim]``
    or ``[..., obs_dim]`` vectors, or ``[C, H, W]`` or ``[..., C, H, W]`` uint8 frames
    (``event_dims=3``).
    """

    def __init__(self, trunk: nn.Module, head: nn.Module, greedy: bool, normalizer: nn.Module | None = None,
                 event_dims: int = 1):
        super().__init__()
        self.normalizer = normalizer if normalizer is not None else nn.Identity()
        self.trunk = trunk
        self.head = head
        self.greedy = greedy
        self.event_dims = event_dims

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        split = observation.dim() - self.event_dims
        batch_shape, event_shape = observation.shape[:split], observation.shape[split:]
        flat = self.normalizer(observation.reshape([-1] + list(event_shape)))
        out = self.head(self.trunk(flat))
        out = out.reshape(batch_shape + out.shape[-1:])
        if self.greedy:
            return out.argmax(dim=-1)
        return out


def export(network: QuantizedNetwork, path: str | Path, greedy: bool = False) -> Path:
    """Writes ``network`` (trunk at its precision + head): an ``ExportedProgram`` if ``path``
    ends in ``.pt2``, else a TorchScript archive.

    Load a ``.pt2`` with ``torch.export.load(path).module()`` (a batch of observations in),
    TorchScript with ``torch.jit.load(path)``. Either file also holds ``actorq.json``
    (precision, codec format, widths, per-layer norms and activations), readable with
    ``torch.export.load(path, extra_files={"actorq.json": ""})`` or
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
    exported_program = path.suffix == EXPORTED_PROGRAM
    trunk = _plain_trunk(network) if exported_program else network.executable_trunk()
    policy = StandalonePolicy(trunk, network.head, greedy, network.normalizer, event_dims(network.layout)).eval()
    metadata = json.dumps(_metadata(network, greedy))
    if exported_program:
        program = torch.export.export(policy, (_example_batch(network),), dynamic_shapes=({0: torch.export.Dim("batch")},))
        torch.export.save(program, path, extra_files={METADATA_FILE: metadata})
        return path
    scripted = torch.jit.script(policy)  # (deprecated upstream, and torch says so: `.pt2` is the maintained format)
    torch.jit.save(scripted, str(path), _extra_files={METADATA_FILE: metadata})
    return path


def _metadata(network: QuantizedNetwork, greedy: bool) -> dict:
    layout = network.layout
    if isinstance(layout, ModuleLayout):
        shape = {"trunk": type(layout.architecture).__name__, "input_shape": list(layout.input_shape),
                 "input_dtype": str(layout.input_dtype).removeprefix("torch.")}
    else:
        shape = {"sizes": list(layout.sizes), "layer_norm": layout.layer_norm,
                 "layers": [dataclasses.asdict(layer) for layer in layout.layers]}
    return {
        "precision": network.quant.describe(),
        "format": network.codec.name,
        **shape,
        "normalizes_observations": network.normalizer is not None,
        "greedy": greedy,
        "torch": torch.__version__,
    }


def _plain_trunk(network: QuantizedNetwork) -> nn.Module:
    """The trunk as operations ``torch.export`` traces: an int8 copy's oneDNN layers as
    :mod:`actorq.quant.reference` computes them; an MLP copy on torch.ao's modules decoded on
    plain int8 tensors first (its payload is the same codes)."""
    spec, layout = network.active_quant, network.layout
    if not spec.codec.int8_kernels:
        return network.executable_trunk()
    if isinstance(layout, ModuleLayout) and not onednn.serves_conv(spec):
        raise ConfigError(f"a .pt2 file holds int8 copies on plain int8 tensors; these actors ran torch.ao's "
                          f"{spec.engine} copy of a convolutional policy: write TorchScript (another suffix) or "
                          f"re-quantize with bits=8")
    if not isinstance(layout, ModuleLayout) and not onednn.serves(spec):
        if not onednn.available():
            raise ConfigError("this torch build has no oneDNN int8 kernels to decode the int8 copy with: "
                              "write TorchScript (another suffix)")
        plain = dataclasses.replace(spec, engine=onednn.PLAIN)
        return reference_trunk(plain.codec.decode(layout, plain, network.payload()))
    return reference_trunk(network.executable_trunk())


def _example_batch(network: QuantizedNetwork) -> torch.Tensor:
    """Two observations shaped and typed as the policy takes them (the batch size is left free)."""
    layout = network.layout
    if isinstance(layout, ModuleLayout):
        return torch.zeros(2, *layout.input_shape, dtype=layout.input_dtype)
    return torch.zeros(2, layout.sizes[0])


def export_checkpoint(checkpoint_path: str | Path, out: str | Path, bits: int | None = None) -> Path:
    """Writes the standalone policy of a checkpoint (or of a run dir's last one); returns the
    path written."""
    path = Path(checkpoint_path)
    if path.is_dir():
        path = path / LAST_CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"no checkpoint at {path}")
    checkpoint = read_checkpoint(path)
    learner, env = load_learner(checkpoint)
    try:
        network = actors_network(checkpoint, learner, env, bits)
    except ValueError as error:  # a precision QuantSpec refuses, e.g. --bits 1
        raise ConfigError(f"--bits {bits}: {error}" if bits is not None else str(error)) from error
    try:
        return export(network, out, greedy=learner.spec.discrete)
    except OSError as error:
        raise ConfigError(f"cannot write {out}: {error.strerror or error}") from error
