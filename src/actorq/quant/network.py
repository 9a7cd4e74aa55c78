"""The actors' policy network: a payload held in plain buffers, run at reduced precision.

:class:`QuantizedNetwork` is a drop-in for the ``network`` inside
:class:`actorq.actors.policy.ExplorationPolicy`. Its payload tensors are registered buffers of
ordinary dtypes, so :meth:`actorq.actors.pool.ActorPool.push` (TorchRL's shared-memory weight
sync, built on ``TensorDict.from_module``) copies them into every worker. A ``version`` buffer
travels with them; a worker that sees a new version rebuilds its executable trunk (torch.ao
quantized modules for int8) before the next forward.

Example:
    >>> from actorq.envs import EnvSpec
    >>> from actorq.algos.networks import DeterministicActor
    >>> env_spec = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    >>> quant = QuantSpec(bits=8, mode="dynamic")
    >>> learner_actor = DeterministicActor(env_spec, hidden=(64, 64))
    >>> actors_copy = QuantizedNetwork.template_for(learner_actor, quant)  # shapes only
    >>> actors_copy.load_payload(quantize(learner_actor, quant))  # then pool.push(policy)
    >>> actors_copy(torch.zeros(5, 3)).shape
    torch.Size([5, 1])
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from actorq.util.errors import ConfigError
from actorq.quant.layout import Payload, TrunkLayout, input_normalizer
from actorq.quant.quantize import quantize
from actorq.quant.spec import QuantSpec

# Versions come from one counter per process, so a payload loaded into any network of the
# learner's process never reuses a number a worker has already built.
_next_version = itertools.count(1)

_NOT_BUILT = -1


class QuantizedNetwork(nn.Module):
    """``obs -> head(trunk(normalizer(obs)))`` with the trunk at the precision of ``quant``.

    Args:
        sizes: trunk widths ``(obs_dim, *hidden, out_dim)`` of an :func:`actorq.algos.networks.mlp`
            trunk, or any :class:`~actorq.quant.layout.TrunkLayout`.
        quant: the precision (``bits="auto"`` must be resolved first).
        head: the fp32 output module (e.g. :class:`actorq.algos.networks.TanhScale`); identity if
            ``None``.
        layer_norm: with ``sizes``: whether the trunk has a ``LayerNorm`` after every hidden
            ``Linear``.
        normalizer: the fp32 observation normalizer the policy applies before its trunk
            (its statistics are buffers, pushed with the payload); none if ``None``.

    Attributes:
        version: int64 buffer, bumped by :meth:`load_payload`; workers rebuild when it changes.
    """

    def __init__(
        self,
        sizes: Sequence[int] | TrunkLayout,
        quant: QuantSpec,
        head: nn.Module | None = None,
        layer_norm: bool = False,
        normalizer: nn.Module | None = None,
    ):
        super().__init__()
        self.register_module("normalizer", normalizer)
        self.layout = sizes if isinstance(sizes, TrunkLayout) else TrunkLayout(tuple(sizes), layer_norm)
        self.quant = quant
        self.codec = quant.codec  # raises for an unresolved bits=auto
        self.codec.check_layout(self.layout)
        self.head = head if head is not None else nn.Identity()
        # A sequence lock around the payload: TorchRL copies buffers in registration order,
        # so a push writes version_begin, then the payload, then version. A worker that
        # reads version before building and the same value in version_begin after it knows
        # no push touched the payload in between (see _build).
        self.register_buffer("version_begin", torch.zeros((), dtype=torch.int64))
        for name, (shape, dtype) in self.codec.payload_spec(self.layout, quant).items():
            self.register_buffer(name, _placeholder(name, shape, dtype))
        self.register_buffer("version", torch.zeros((), dtype=torch.int64))
        self._forget_trunk()

    @classmethod
    def template_for(cls, network: nn.Module, quant: QuantSpec) -> QuantizedNetwork:
        """A template shaped like an fp32 policy (``trunk`` + ``head``, head and observation
        normalizer copied), with an all-zero payload. Works for any head, e.g. SAC's squashed
        Gaussian."""
        normalizer = input_normalizer(network)
        return cls(TrunkLayout.from_trunk(network.trunk), quant, head=copy.deepcopy(network.head),
                   normalizer=copy.deepcopy(normalizer) if normalizer is not None else None)

    @classmethod
    def from_network(
        cls, network: nn.Module, quant: QuantSpec, calibration: torch.Tensor | None = None
    ) -> QuantizedNetwork:
        """Quantizes an fp32 policy (``trunk`` + ``head``) into a new network (head copied)."""
        quantized = cls.template_for(network, quant)
        quantized.load_payload(quantize(network, quant, calibration))
        return quantized

    def payload(self) -> Payload:
        """The current payload (the buffers themselves, not copies)."""
        return {name: getattr(self, name) for name in self.codec.payload_spec(self.layout, self.quant)}

    def load_payload(self, payload: Payload) -> None:
        """Copies a payload from :func:`actorq.quant.quantize` in place and bumps ``version``.

        After this, ``pool.push(policy)`` with the policy that holds this network carries the
        payload to every actor. The buffers may be the very memory workers read, so the write
        follows the sequence lock: ``version_begin`` first, then the payload, then ``version``.
        """
        expected = self.codec.payload_spec(self.layout, self.quant)
        if set(payload) != set(expected):
            missing, extra = sorted(set(expected) - set(payload)), sorted(set(payload) - set(expected))
            raise ConfigError(
                f"payload does not fit this {self.quant.describe()} network: "
                f"missing {missing}, unexpected {extra}"
            )
        for name, (shape, dtype) in expected.items():
            value = payload[name]
            if tuple(value.shape) != shape or value.dtype != dtype:
                raise ConfigError(
                    f"payload tensor {name} is {value.dtype}{list(value.shape)}, "
                    f"expected {dtype}{list(shape)}"
                )
        version = next(_next_version)
        self.version_begin.fill_(version)  # readers that snapshot from now on retry
        for name in expected:
            getattr(self, name).copy_(payload[name])
        self.version.fill_(version)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        self._ensure_built()
        # Direct dict lookups: nn.Module.__getattr__ costs more than a small actor's matmul.
        run, head, normalizer = self._run_trunk, self._modules["head"].forward, self._modules["normalizer"]
        if normalizer is not None:
            observation = normalizer(observation)
        if observation.dim() == 2:
            return head(run(observation))
        if observation.dim() == 1:  # quantized linear kernels need a batch dimension
            return head(run(observation.unsqueeze(0))).squeeze(0)
        flat = run(observation.reshape(-1, observation.shape[-1]))
        return head(flat.reshape(*observation.shape[:-1], flat.shape[-1]))

    def sample(self, observation: torch.Tensor) -> torch.Tensor:
        """``head.sample(trunk(obs))``: a stochastic policy's action (SAC's actors)."""
        return self._modules["head"].sample(self.features(observation))

    def sample_with_log_prob(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``head.sample_with_log_prob(trunk(obs))``: an action and its log-probability under
        this (reduced-precision) policy, what on-policy actors record."""
        return self._modules["head"].sample_with_log_prob(self.features(observation))

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        """The trunk's output for ``[obs_dim]`` or ``[..., obs_dim]`` observations (normalized
        first, if the policy normalizes them)."""
        self._ensure_built()
        run, normalizer = self._run_trunk, self._modules["normalizer"]
        if normalizer is not None:
            observation = normalizer(observation)
        if observation.dim() == 2:
            return run(observation)
        flat = run(observation.reshape(-1, observation.shape[-1]))
        return flat.reshape(*observation.shape[:-1], flat.shape[-1])

    def executable_trunk(self) -> nn.Sequential:
        """The trunk actually run (rebuilt from the current payload if it changed)."""
        self._ensure_built()
        return self._trunk

    def _ensure_built(self) -> None:
        if self._buffers["version"].item() != self._built_version:
            self._build()

    def _build(self) -> None:
        for attempt in itertools.count():  # retry while a push is (or was) rewriting the payload
            version = int(self.version)
            # A snapshot, not the buffers: built modules may keep references to the tensors
            # they are given (fbgemm keeps the bias), and the next push rewrites the buffers
            # in place before it bumps ``version``.
            snapshot = {name: tensor.clone() for name, tensor in self.payload().items()}
            if int(self.version_begin) == version:
                break
            if attempt >= 3:
                time.sleep(0.0005)  # a push is under way: let the writer finish
        trunk = self.codec.decode(self.layout, self.quant, snapshot)
        # Kept out of nn.Module's registry: torch.ao packed weights are invisible to weight
        # sync anyway, and the synced structure must not depend on what was built.
        object.__setattr__(self, "_trunk", trunk)
        object.__setattr__(self, "_run_trunk", direct_calls(trunk))
        object.__setattr__(self, "_built_version", version)

    def _forget_trunk(self) -> None:
        object.__setattr__(self, "_trunk", None)
        object.__setattr__(self, "_run_trunk", None)
        object.__setattr__(self, "_built_version", _NOT_BUILT)

    def __getstate__(self) -> dict:
        # Workers and deep copies rebuild the trunk; packed int8 weights do not pickle.
        state = self.__dict__.copy()
        state["_trunk"], state["_run_trunk"], state["_built_version"] = None, None, _NOT_BUILT
        return state

    def extra_repr(self) -> str:
        activations = [layer.activation for layer in self.layout.layers]
        norms = [layer.norm for layer in self.layout.layers]
        return f"{self.quant.describe()}, sizes={self.layout.sizes}, norms={norms}, activations={activations}"


def direct_calls(trunk: nn.Sequential) -> Callable[[torch.Tensor], torch.Tensor]:
    """``trunk``'s forward without ``nn.Module.__call__``: each module's work called directly.

    An actor runs its trunk once per env step, often at batch 1, where ``nn.Module.__call__``
    (hook bookkeeping, ~1 µs a module) and ``nn.Linear.forward``'s attribute lookups cost as
    much as a 64-wide layer's arithmetic. Forward hooks on the trunk's modules would not run;
    none are registered (the trunk is rebuilt from each new payload).
    """
    steps = tuple(_direct_call(module) for module in trunk)

    def run(x: torch.Tensor) -> torch.Tensor:
        for step in steps:
            x = step(x)
        return x

    return run


def _direct_call(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    if type(module) is nn.Linear:
        weight, bias = module.weight, module.bias
        return lambda x: _linear(x, weight, bias)
    if type(module) is nn.ReLU:
        return torch.relu
    return module.forward


_linear = torch._C._nn.linear  # what F.linear calls, without its torch-function check


def _placeholder(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    # Scales of 1 keep an unfilled template runnable (it outputs head(bias) = head(0)).
    fill = 1 if name.endswith("scale") else 0
    return torch.full(shape, fill, dtype=dtype)
