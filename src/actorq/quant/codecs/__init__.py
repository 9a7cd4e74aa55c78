"""One codec per precision format, found by :func:`codec_for` from a :class:`~actorq.quant.QuantSpec`.

A codec turns an fp32 trunk into a payload of plain tensors (:meth:`Codec.encode`, on the
learner) and a payload back into a runnable trunk (:meth:`Codec.decode`, in every actor); it
also says which tensors a payload holds (:meth:`Codec.payload_spec`), which specs it serves
and how to describe them. ``QuantSpec`` validation reads the allowed ``bits`` and ``mode``
values from this registry.

Adding a format is one new module in this package (a :class:`Codec` subclass decorated with
:func:`register`): every module here is imported when the package is, built-ins first. A codec
defined elsewhere (a test, a plugin) registers the same way once its module is imported, and
:func:`unregister` removes it. ``QuantSpec(format=name)`` selects a codec explicitly; without
``format`` the ``bits``/``mode`` pair does.

Example:
    >>> from actorq.quant import QuantSpec
    >>> codec_for(QuantSpec(bits=8, mode="static")).name, codec_for(QuantSpec(bits=4, mode="dynamic")).name
    ('int8_static_fp32_ends', 'simulated')
    >>> codec_for(QuantSpec(bits=8, mode="static", format="int8_static")).name
    'int8_static'
    >>> [codec.name for codec in registered()][:6]
    ['fp32', 'bf16', 'int8_static', 'int8_static_fp32_ends', 'int8_dynamic', 'simulated']
"""

from __future__ import annotations

import importlib
import pkgutil

from actorq.quant.codecs._base import (
    Codec,
    bits_help,
    check_bits,
    codec_for,
    full_precision,
    mode_for,
    modes,
    register,
    registered,
    select,
    unregister,
)
from actorq.quant.codecs._parts import (
    assemble,
    bias_of,
    codes,
    codes_payload_spec,
    dequantize_codes,
    float_payload,
    float_payload_spec,
    norm_params,
    norm_payload_spec,
    plain_linear,
    plain_norm,
    plain_trunk,
    prefixed,
    stored_weights,
    weight_codes_payload_spec,
)
from actorq.quant.layout import Payload, PayloadSpec

# Built-ins first, in this order (it orders QuantSpec's messages); then any other module here.
_BUILTIN = ("fp32", "bf16", "int8_static", "int8_static_fp32_ends", "int8_dynamic", "int8_dynamic_fp32_ends", "simulated")
for _name in (*_BUILTIN, *sorted({m.name for m in pkgutil.iter_modules(__path__)} - set(_BUILTIN))):
    if not _name.startswith("_"):
        importlib.import_module(f"{__name__}.{_name}")

__all__ = [
    "Codec",
    "Payload",
    "PayloadSpec",
    "assemble",
    "bias_of",
    "bits_help",
    "check_bits",
    "codec_for",
    "codes",
    "codes_payload_spec",
    "dequantize_codes",
    "float_payload",
    "float_payload_spec",
    "full_precision",
    "mode_for",
    "modes",
    "norm_params",
    "norm_payload_spec",
    "plain_linear",
    "plain_norm",
    "plain_trunk",
    "prefixed",
    "register",
    "registered",
    "select",
    "stored_weights",
    "unregister",
    "weight_codes_payload_spec",
]
