"""The actors' policy network: a payload held in plain buffers, run at reduced precision.

:class:`QuantizedNetwork` is a drop-in for the ``network`` inside
:class:`actorq.actors.policy.ExplorationPolicy`. Its payload tensors are registered buffers of
ordinary dtypes, so :meth:`actorq.actors.pool.ActorPool.push` (TorchRL's shared-memory weight
sync, built on ``TensorDict.from_module``) copies them into every worker. A ``version`` buffer
travels with them; a worker that sees a new version rebuilds its executable trunk (torch.ao
quantized modules for int8) before the next forward, from a snapshot of the whole version:
payload, head state (a learned log-std) and observation statistics, taken under a sequence
lock, so a push is one whole policy version to every reader.

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
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import torch
from torch import nn

from actorq.util.errors import ConfigError
from actorq.quant.layout import Payload, TrunkLayout, input_normalizer
from actorq.quant.module_layout import ModuleLayout, event_dims, layout_of
from actorq.quant.quantize import quantize
from actorq.quant.spec import QuantSpec

# Versions come from one counter per process, so a payload loaded into any network of the
# learner's process never reuses a number a worker has already built.
_next_version = itertools.count(1)



class BuiltVersion(NamedTuple):
    """One policy version as a reader runs it: private copies, never written by a later load.

    Attributes:
        version: the ``version`` it was built from.
        trunk: the executable trunk decoded from the payload.
        run: ``trunk``'s forward without module-call overhead (:func:`direct_calls`).
        head: a copy of the head with this version's state.
        normalizer: a copy of the observation normalizer with this version's statistics
            (``None`` if the policy has none).
        policy_version: the pushed policy version it is (int64 scalar; what actors record).
        event_dims: how many trailing dimensions one observation has (1: a vector; 3: frames).
    """

    version: int
    trunk: nn.Sequential
    run: Callable[[torch.Tensor], torch.Tensor]
    head: nn.Module
    normalizer: nn.Module | None
    policy_version: torch.Tensor
    event_dims: int = 1

    def output(self, observation: torch.Tensor) -> torch.Tensor:
        """This version's ``head(trunk(normalize(obs)))``, whatever was loaded since."""
        return _output(self, observation)


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
        fallbacks: precisions a version may be loaded at instead of ``quant``
            (:meth:`QuantSpec.fallbacks`, for the divergence budget): each has buffers of
            its own, and ``rung`` says which one the loaded version is in.

    Attributes:
        version: int64 buffer, bumped by :meth:`load_version`; workers rebuild when it changes.
        rung: int64 buffer: the precision of the loaded version, an index into :attr:`rungs`.
        head: the head holding the state of the version loaded last (what weight sync copies);
            a forward runs the copy built with the trunk (:class:`BuiltVersion`).
        normalizer: likewise, the observation normalizer (``None`` without one).
    """

    def __init__(
        self,
        sizes: Sequence[int] | TrunkLayout,
        quant: QuantSpec,
        head: nn.Module | None = None,
        layer_norm: bool = False,
        normalizer: nn.Module | None = None,
        fallbacks: Sequence[QuantSpec] = (),
    ):
        super().__init__()
        self.register_module("normalizer", normalizer)
        layouts = (TrunkLayout, ModuleLayout)
        self.layout = sizes if isinstance(sizes, layouts) else TrunkLayout(tuple(sizes), layer_norm)
        self.quant = quant
        self.codec = quant.codec  # raises for an unresolved bits=auto
        self.rungs = (quant, *fallbacks)
        for rung in self.rungs:
            rung.codec.fits(self.layout, rung)
        self.head = head if head is not None else nn.Identity()
        # A sequence lock around the whole version (payload, head, normalizer): load_version
        # writes version_begin, then the rest, then version. A reader that reads version
        # before its snapshot and the same value in version_begin after it knows no load
        # touched the version in between (see _build).
        self.register_buffer("version_begin", torch.zeros((), dtype=torch.int64))
        for rung, spec in enumerate(self.rungs):
            for name, (shape, dtype) in spec.codec.payload_spec(self.layout, spec).items():
                self.register_buffer(_buffer_name(rung, name), _placeholder(name, shape, dtype))
        self.register_buffer("rung", torch.zeros((), dtype=torch.int64))
        self.register_buffer("policy_version", torch.zeros((), dtype=torch.int64))
        self.register_buffer("version", torch.zeros((), dtype=torch.int64))
        self._forget_trunk()

    @classmethod
    def template_for(cls, network: nn.Module, quant: QuantSpec,
                     fallbacks: Sequence[QuantSpec] = ()) -> QuantizedNetwork:
        """A template shaped like an fp32 policy (``trunk`` + ``head``, head and observation
        normalizer copied), with an all-zero payload. Works for any head, e.g. SAC's squashed
        Gaussian."""
        normalizer = input_normalizer(network)
        return cls(layout_of(network.trunk), quant, head=copy.deepcopy(network.head),
                   normalizer=copy.deepcopy(normalizer) if normalizer is not None else None, fallbacks=fallbacks)

    @classmethod
    def from_network(
        cls, network: nn.Module, quant: QuantSpec, calibration: torch.Tensor | None = None,
        fallbacks: Sequence[QuantSpec] = (),
    ) -> QuantizedNetwork:
        """Quantizes an fp32 policy (``trunk`` + ``head``) into a new network (head copied)."""
        quantized = cls.template_for(network, quant, fallbacks)
        quantized.load_payload(quantize(network, quant, calibration))
        return quantized

    @property
    def active_quant(self) -> QuantSpec:
        """The precision of the version loaded last: ``quant``, or the fallback it went out at."""
        return self.rungs[int(self.rung)]

    def payload(self, rung: int | None = None) -> Payload:
        """The payload of the version loaded last, or of precision ``rung`` (the buffers
        themselves, not copies), under the codec's names."""
        rung = int(self.rung) if rung is None else rung
        spec = self.rungs[rung]
        return {name: getattr(self, _buffer_name(rung, name)) for name in spec.codec.payload_spec(self.layout, spec)}

    def idle_buffers(self) -> list[str]:
        """The payload buffers of the precisions the loaded version is not at: what a push
        that copies the network (Ray's) can leave out."""
        active = int(self.rung)
        return [_buffer_name(rung, name) for rung, spec in enumerate(self.rungs) if rung != active
                for name in spec.codec.payload_spec(self.layout, spec)]

    def load_payload(self, payload: Payload) -> None:
        """Copies a payload from :func:`actorq.quant.quantize` in place and bumps ``version``,
        keeping the head's and the normalizer's state: :meth:`load_version` with the payload
        alone."""
        self.load_version(payload)

    def load_version(
        self,
        payload: Payload,
        head_state: Mapping[str, torch.Tensor] | None = None,
        normalizer_state: Mapping[str, torch.Tensor] | None = None,
        policy_version: int | None = None,
        rung: int = 0,
    ) -> None:
        """Loads a whole policy version in place and bumps ``version``: the payload, the
        head's own state and the observation normalizer's statistics.

        After this, ``pool.push(policy)`` with the policy that holds this network carries the
        version to every actor. The tensors written are the very memory the workers read
        (TorchRL's shared-memory sync shares them), so the load is the push's write, and it
        follows the sequence lock whatever order TorchRL copies keys in: ``version_begin``
        first, then the payload, head and normalizer, then ``version``. Every part is checked
        before anything is written.

        Args:
            payload: from :func:`actorq.quant.quantize`.
            head_state: the head's ``state_dict()`` (a learned log-std); ``None`` keeps the
                current one.
            normalizer_state: the observation normalizer's ``state_dict()``; ``None`` keeps
                the current statistics.
            policy_version: the pushed version number the actors record with each step
                (:meth:`sample_with_log_prob_and_version`); ``None`` keeps the current one.
            rung: the precision ``payload`` is at, an index into :attr:`rungs` (0: ``quant``).

        Raises:
            ConfigError: a part does not fit this network (nothing is written then).
        """
        if not 0 <= rung < len(self.rungs):
            raise ConfigError(f"precision {rung} of a network with {len(self.rungs)}: "
                              f"{', '.join(spec.describe() for spec in self.rungs)}")
        writes = list(self._payload_writes(payload, rung))
        writes.append((self.rung, torch.tensor(rung)))
        if head_state is not None:
            writes += _state_writes(self.head, head_state, "head")
        if normalizer_state is not None:
            if self._modules["normalizer"] is None:
                raise ConfigError("a normalizer state was given to a network that does not normalize observations")
            writes += _state_writes(self._modules["normalizer"], normalizer_state, "normalizer")
        if policy_version is not None:
            writes.append((self.policy_version, torch.tensor(int(policy_version))))
        version = next(_next_version)
        with torch.no_grad():
            self.version_begin.fill_(version)  # readers that snapshot from now on retry
            for target, value in writes:
                target.copy_(value)
            self.version.fill_(version)

    def _payload_writes(self, payload: Payload, rung: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(buffer, new value)`` for every payload tensor, checked against the codec's spec."""
        spec = self.rungs[rung]
        expected = spec.codec.payload_spec(self.layout, spec)
        if set(payload) != set(expected):
            missing, extra = sorted(set(expected) - set(payload)), sorted(set(payload) - set(expected))
            raise ConfigError(
                f"payload does not fit this {spec.describe()} network: "
                f"missing {missing}, unexpected {extra}"
            )
        for name, (shape, dtype) in expected.items():
            value = payload[name]
            if tuple(value.shape) != shape or value.dtype != dtype:
                raise ConfigError(
                    f"payload tensor {name} is {value.dtype}{list(value.shape)}, "
                    f"expected {dtype}{list(shape)}"
                )
        return [(getattr(self, _buffer_name(rung, name)), payload[name]) for name in expected]

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return _output(self.built(), observation)

    def forward_with_version(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` and the pushed version (``policy_version``) of the very snapshot
        that computed it (what off-policy actors record with each step)."""
        built = self.built()
        return _output(built, observation), built.policy_version

    def sample(self, observation: torch.Tensor) -> torch.Tensor:
        """``head.sample(trunk(obs))``: a stochastic policy's action (SAC's actors)."""
        built = self.built()
        return built.head.sample(_features(built, observation))

    def sample_with_log_prob(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``head.sample_with_log_prob(trunk(obs))``: an action and its log-probability under
        this (reduced-precision) policy, what on-policy actors record. Both come from one
        version, however often the head reads its state."""
        built = self.built()
        return built.head.sample_with_log_prob(_features(built, observation))

    def sample_with_log_prob_and_version(
        self, observation: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`sample_with_log_prob` and the pushed version (``policy_version``) of the
        very snapshot that sampled them: a push under way never labels one version's actions
        with another's number."""
        built = self.built()
        action, log_prob = built.head.sample_with_log_prob(_features(built, observation))
        return action, log_prob, built.policy_version

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        """The trunk's output for ``[obs_dim]`` or ``[..., obs_dim]`` observations (normalized
        first, if the policy normalizes them)."""
        return _features(self.built(), observation)

    def executable_trunk(self) -> nn.Sequential:
        """The trunk actually run (rebuilt from the current payload if it changed)."""
        return self.built().trunk

    def built(self) -> BuiltVersion:
        """The version this network runs: the last one loaded (built from it if it is new)."""
        built = self._built
        if built is None or self._buffers["version"].item() != built.version:
            built = self._build()
        return built

    def _build(self) -> BuiltVersion:
        for attempt in itertools.count():  # retry while a load is (or was) rewriting the version
            version = int(self.version)
            rung = int(self.rung)
            # A snapshot, not the live tensors: built modules may keep references to the
            # tensors they are given (fbgemm keeps the bias), and the next load rewrites
            # them in place before it bumps ``version``.
            snapshot = {name: tensor.clone() for name, tensor in self.payload(rung).items()}
            head, normalizer = _frozen_copy(self.head), _frozen_copy(self._modules["normalizer"])
            policy_version = self.policy_version.clone()
            if int(self.version_begin) == version:
                break
            if attempt >= 3:
                time.sleep(0.0005)  # a load is under way: let the writer finish
        spec = self.rungs[rung]
        trunk = spec.codec.decode(self.layout, spec, snapshot)
        # Kept out of nn.Module's registry: torch.ao packed weights are invisible to weight
        # sync anyway, and the synced structure must not depend on what was built. One
        # assignment, so a reader sees the old version or the new one, whole.
        run = direct_calls(trunk) if isinstance(self.layout, TrunkLayout) else trunk
        built = BuiltVersion(version, trunk, run, head, normalizer, policy_version, event_dims(self.layout))
        object.__setattr__(self, "_built", built)
        return built

    def _forget_trunk(self) -> None:
        object.__setattr__(self, "_built", None)

    def __getstate__(self) -> dict:
        # Workers and deep copies rebuild the trunk; packed int8 weights do not pickle.
        state = self.__dict__.copy()
        state["_built"] = None
        return state

    def extra_repr(self) -> str:
        if isinstance(self.layout, ModuleLayout):
            return f"{self.quant.describe()}, {type(self.layout.architecture).__name__} trunk of {self.layout.input_shape}"
        activations = [layer.activation for layer in self.layout.layers]
        norms = [layer.norm for layer in self.layout.layers]
        return f"{self.quant.describe()}, sizes={self.layout.sizes}, norms={norms}, activations={activations}"


def _output(built: BuiltVersion, observation: torch.Tensor) -> torch.Tensor:
    """``head(trunk(normalize(obs)))`` of ``built`` for one observation or a batch of any shape."""
    return built.head.forward(_features(built, observation))


def _features(built: BuiltVersion, observation: torch.Tensor) -> torch.Tensor:
    """``built``'s trunk output for one observation or a batch of any shape (normalized
    first, if the policy normalizes them); quantized kernels need one batch dimension.

    At the copy's own precision, as the actors run it, also where the caller is under
    autocast (a bf16-mixed learner's training step, which checks the actors' log-probs with
    its copy): autocast would run its fp32 layers in bf16."""
    if torch.is_autocast_enabled(observation.device.type):
        with torch.autocast(observation.device.type, enabled=False):
            return _features(built, observation)
    if built.normalizer is not None:
        observation = built.normalizer(observation)
    batch_shape = observation.shape[:observation.dim() - built.event_dims]
    if len(batch_shape) == 1:
        return built.run(observation)
    flat = built.run(observation.reshape(-1, *observation.shape[len(batch_shape):]))
    return flat.reshape(*batch_shape, flat.shape[-1])


def _frozen_copy(module: nn.Module | None) -> nn.Module | None:
    """A private copy of ``module`` whose tensors no load writes (``None`` stays ``None``)."""
    return None if module is None else copy.deepcopy(module).requires_grad_(False)


def _state_writes(module: nn.Module, state: Mapping[str, torch.Tensor], part: str
                  ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(tensor, new value)`` for every entry of ``module``'s state, checked against ``state``."""
    targets = module.state_dict(keep_vars=True)
    if set(state) != set(targets):
        raise ConfigError(f"{part} state does not fit this network: expected {sorted(targets)}, got {sorted(state)}")
    for name, target in targets.items():
        if state[name].shape != target.shape:
            raise ConfigError(f"{part} tensor {name} is {list(state[name].shape)}, expected {list(target.shape)}")
    return [(target, state[name]) for name, target in targets.items()]


def direct_calls(trunk: nn.Sequential) -> Callable[[torch.Tensor], torch.Tensor]:
    """``trunk``'s forward without ``nn.Module.__call__``: each module's work called directly.

    An actor runs its trunk once per env step, often at batch 1, where ``nn.Module.__call__``
    (hook bookkeeping per module) and ``nn.Linear.forward``'s attribute lookups cost as
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


def _buffer_name(rung: int, name: str) -> str:
    """The buffer holding payload tensor ``name`` of precision ``rung`` (its own name at 0)."""
    return name if rung == 0 else f"fallback{rung}_{name}"


def _placeholder(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    # Scales of 1 keep an unfilled template runnable (it outputs head(bias) = head(0)).
    fill = 1 if name.endswith("scale") else 0
    return torch.full(shape, fill, dtype=dtype)
