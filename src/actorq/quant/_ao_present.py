"""Whether this torch still has torch.ao's quantized modules and engines (PyTorch is removing
them): :mod:`actorq.quant._ao` runs them, and without them every int8 copy runs on plain
int8 tensors (:mod:`actorq.quant.onednn`). Apart from :mod:`~actorq.quant._ao`, the one module
that imports torch.ao, to find out."""

from __future__ import annotations

import importlib

import torch

MODULES = ("torch.ao.nn.intrinsic", "torch.ao.nn.intrinsic.quantized", "torch.ao.nn.quantized",
           "torch.ao.nn.quantized.dynamic", "torch.ao.quantization", "torch.ao.nn.quantized.modules.utils",
           "torch.ao.quantization.observer", "torch.ao.quantization.quantize_fx")
"""What :mod:`actorq.quant._ao` imports."""


def _importable() -> bool:
    try:
        for name in MODULES:
            importlib.import_module(name)
    except ImportError:
        return False
    return hasattr(torch, "quint8") and hasattr(torch, "qint8")


AVAILABLE = _importable()
ENGINES = tuple(engine for engine in torch.backends.quantized.supported_engines if engine != "none") if AVAILABLE \
    else ()
"""The int8 kernel libraries torch.ao's quantized modules can pack for in this torch."""
