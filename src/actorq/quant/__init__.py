"""Quantized actors: the learner's fp32 policy -> a plain-tensor payload -> int8 actors.

The learner calls :func:`quantize` (post-training quantization with torch.ao) and loads the
payload into the actors' :class:`QuantizedNetwork` with
:meth:`QuantizedNetwork.load_payload`; ``ActorPool.push`` then copies it to every worker,
where the network rebuilds its quantized modules. Each precision format is one
:class:`Codec` in :mod:`actorq.quant.codecs` (``register``/``unregister``/``codec_for``
there). torch.ao is imported only inside this package (in ``_ao.py``, and by ``_ao_present.py``
to find out whether this torch still has it).

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import DeterministicActor
    >>> env_spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> learner_actor = DeterministicActor(env_spec, hidden=(64, 64))
    >>> quant = QuantSpec(bits=8, mode="static")
    >>> actors_copy = QuantizedNetwork.template_for(learner_actor, quant)
    >>> actors_copy.load_payload(quantize(learner_actor, quant, calibration=torch.randn(256, 3)))
    >>> action_error(learner_actor, actors_copy, torch.randn(256, 3)) < 0.05
    True
"""

import torch  # noqa: F401  (the example above uses it)

from actorq.quant.codecs import Codec, codec_for
from actorq.quant.auto import PrecisionChoice, choose, resolve_precision, select_precision
from actorq.quant.fidelity import (
    action_agreement,
    action_error,
    fidelity_metrics,
    fp32_nbytes,
    has_kl,
    policy_divergence,
    weight_error,
)
from actorq.quant.layout import LayerLayout, TrunkLayout
from actorq.quant.network import QuantizedNetwork
from actorq.quant.quantize import Payload, payload_nbytes, quantize, reference_module
from actorq.quant.spec import QuantSpec
from actorq.quant.timing import Timing, time_forward

__all__ = [
    "Codec",
    "LayerLayout",
    "Payload",
    "PrecisionChoice",
    "QuantSpec",
    "QuantizedNetwork",
    "Timing",
    "TrunkLayout",
    "action_agreement",
    "action_error",
    "choose",
    "codec_for",
    "fidelity_metrics",
    "fp32_nbytes",
    "has_kl",
    "payload_nbytes",
    "policy_divergence",
    "quantize",
    "reference_module",
    "resolve_precision",
    "select_precision",
    "time_forward",
    "weight_error",
]
