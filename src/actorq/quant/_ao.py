"""The one place that touches ``torch.ao`` (deprecated upstream in favour of torchao).

Everything else in :mod:`actorq.quant` sees plain tensors and ``nn.Module`` objects, so
swapping the backend means rewriting this file only. Three parts:

* the observer table :data:`CALIBRATION_OBSERVERS` (``quant.calibration`` accepts its keys);
* learner side: eager-mode post-training quantization (``prepare``/``convert`` with the
  observers a :class:`~actorq.quant.spec.QuantSpec` names, or ``quantize_dynamic``), and the
  plain codes and qparams: read from the calibrated observers (static, what ``convert``
  computes without packing the weights) or from the converted modules (dynamic);
* worker side: quantized modules rebuilt from plain ``int8`` codes and float scales;
* convolutional policies: FX graph-mode static int8 (:func:`convert_static_fx`).
"""

from __future__ import annotations

import collections
import copy
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn

from actorq.quant._ao_present import AVAILABLE, ENGINES

if AVAILABLE:  # (without them, PyTorch having removed them, int8 actors run on plain tensors only)
    import torch.ao.nn.intrinsic as nni
    import torch.ao.nn.intrinsic.quantized as nniq
    import torch.ao.nn.quantized as nnq
    import torch.ao.nn.quantized.dynamic as nnqd
    import torch.ao.quantization as tq
    from torch.ao.nn.quantized.modules.utils import _quantize_weight
    from torch.ao.quantization import observer as tqo
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

if TYPE_CHECKING:
    from actorq.quant.spec import QuantSpec

# torch.ao is deprecated upstream, and torch says so (once per process: the quantized tensors'
# creation warns in the learner and in each actor worker that builds a torch.ao copy); no filter
# here hides it.

ACTIVATION_DTYPE = getattr(torch, "quint8", None)
WEIGHT_DTYPE = getattr(torch, "qint8", None)
# Activations that feed an int8 Linear use all 8 bits where the engine's kernel sums such
# inputs exactly on this CPU, else 7 (see saturates_full_range).
REDUCED_ACTIVATION_MAX = 127
FULL_ACTIVATION_MAX = 255

ObserverFactory = Callable[[], nn.Module]

# quant.calibration -> (spec, reduce_range) -> activation observer constructor (reduce_range:
# 7-bit codes). QuantSpec accepts exactly these names (in this order in its error message), so
# a new learned observer is one entry here (it may read its parameters from the spec) plus its test.
CALIBRATION_OBSERVERS: dict[str, Callable[[QuantSpec, bool], ObserverFactory]] = {
    "minmax": lambda spec, reduce_range: tqo.MinMaxObserver.with_args(
        dtype=ACTIVATION_DTYPE, reduce_range=reduce_range
    ),
    "moving_average": lambda spec, reduce_range: tqo.MovingAverageMinMaxObserver.with_args(
        dtype=ACTIVATION_DTYPE, reduce_range=reduce_range
    ),
    "histogram": lambda spec, reduce_range: tqo.HistogramObserver.with_args(
        dtype=ACTIVATION_DTYPE, reduce_range=reduce_range
    ),
}


# ---------------------------------------------------------------------------- observers


def _weight_observer(per_channel: bool) -> Callable[[], nn.Module]:
    if per_channel:
        return tqo.PerChannelMinMaxObserver.with_args(
            ch_axis=0, dtype=WEIGHT_DTYPE, qscheme=torch.per_channel_symmetric
        )
    return tqo.MinMaxObserver.with_args(dtype=WEIGHT_DTYPE, qscheme=torch.per_tensor_symmetric)


def _activation_observer(spec: QuantSpec, low: float, high: float, feeds_linear: bool) -> ObserverFactory:
    reduce_range = feeds_linear and kernels_saturate(spec)
    if spec.observer == "fixed":
        return _fixed_observer(low, high, reduce_range)
    return CALIBRATION_OBSERVERS[spec.calibration](spec, reduce_range)


def _fixed_observer(low: float, high: float, reduce_range: bool) -> Callable[[], nn.Module]:
    quant_max = REDUCED_ACTIVATION_MAX if reduce_range else FULL_ACTIVATION_MAX
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / quant_max
    zero_point = int(round(-low / scale))
    return tqo.FixedQParamsObserver.with_args(
        scale=scale, zero_point=zero_point, dtype=ACTIVATION_DTYPE, quant_min=0, quant_max=quant_max
    )


# ---------------------------------------------------------------------------- learner side


class _Staged(nn.Module):
    """``QuantStub -> trunk -> DeQuantStub``: the shape eager-mode PTQ expects."""

    def __init__(self, trunk: nn.Sequential):
        super().__init__()
        self.quant = tq.QuantStub()
        self.trunk = trunk
        self.dequant = tq.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.trunk(self.quant(x)))


def fusable_pairs(trunk: nn.Sequential) -> list[list[str]]:
    """``[["0", "1"], ...]``: every ``Linear`` directly followed by a ``ReLU``."""
    children = list(trunk)
    return [
        [str(i), str(i + 1)]
        for i in range(len(children) - 1)
        if isinstance(children[i], nn.Linear) and isinstance(children[i + 1], nn.ReLU)
    ]


def convert_static(
    trunk: nn.Sequential, calibration: torch.Tensor | None, spec: QuantSpec, chunks: int = 8
) -> nn.Module:
    """Eager-mode static PTQ of a copy of ``trunk``: fuse, observe, calibrate, convert.

    Args:
        trunk: ``Linear -> [LayerNorm] -> [ReLU]`` blocks (the int8 static codec checks that).
        calibration: observations ``[N, in]``; ignored by the fixed observer.
        spec: granularity, observer, calibration kind, input range and activation max.

    Returns:
        The converted module; ``.quant`` is a quantize module with the input qparams and
        ``.trunk`` holds ``LinearReLU``/``Linear``/``LayerNorm`` quantized modules.
    """
    prepared = calibrate_static(trunk, calibration, spec, chunks)
    return tq.convert(prepared)


def calibrate_static(
    trunk: nn.Sequential, calibration: torch.Tensor | None, spec: QuantSpec, chunks: int = 8
) -> nn.Module:
    """:func:`convert_static` up to the conversion: a fused copy of ``trunk`` with observers,
    run on the calibration (:func:`observed_layers` and :func:`observed_linear` read the int8
    payload from it)."""
    staged = _Staged(copy.deepcopy(trunk)).eval()
    pairs = fusable_pairs(staged.trunk)
    if pairs:
        staged.trunk = tq.fuse_modules(staged.trunk, pairs)
    _assign_qconfigs(staged, spec)
    prepared = tq.prepare(staged)
    with torch.no_grad():
        for part in _calibration_chunks(calibration, spec.input_range, staged, chunks):
            prepared(part)
    return prepared


def _assign_qconfigs(staged: _Staged, spec: QuantSpec) -> None:
    """Activation ranges: 7 bits wherever a Linear reads them, 8 bits at the trunk's output."""
    weight = _weight_observer(spec.granularity == "per_channel")
    amax = spec.activation_max

    def qconfig(low: float, high: float, feeds_linear: bool) -> tq.QConfig:
        return tq.QConfig(activation=_activation_observer(spec, low, high, feeds_linear), weight=weight)

    layers = list(staged.trunk)
    observed = [i for i, m in enumerate(layers) if isinstance(m, (nn.Linear, nni.LinearReLU, nn.LayerNorm))]
    staged.qconfig = qconfig(-amax, amax, True)
    staged.quant.qconfig = qconfig(*spec.input_range, True)
    for i in observed:
        low = 0.0 if isinstance(layers[i], nni.LinearReLU) else -amax
        layers[i].qconfig = qconfig(low, amax, feeds_linear=i != observed[-1])


def _calibration_chunks(
    calibration: torch.Tensor | None,
    input_range: tuple[float, float],
    staged: _Staged,
    chunks: int,
) -> list[torch.Tensor]:
    if calibration is None or len(calibration) == 0:
        # Fixed observers ignore the values; the pass only has to run once.
        in_features = next(m for m in staged.trunk.modules() if isinstance(m, nn.Linear)).in_features
        calibration = torch.empty(2, in_features).uniform_(*input_range)
    calibration = calibration.detach().float().reshape(-1, calibration.shape[-1])
    return list(torch.chunk(calibration, min(chunks, len(calibration))))


def convert_dynamic(trunk: nn.Sequential, spec: QuantSpec) -> nn.Module:
    """``quantize_dynamic`` of a copy of ``trunk``: its ``Linear`` layers become int8."""
    per_channel = spec.granularity == "per_channel"
    qconfig = tq.per_channel_dynamic_qconfig if per_channel else tq.default_dynamic_qconfig
    converted = tq.quantize_dynamic(copy.deepcopy(trunk).eval(), {nn.Linear: qconfig}, dtype=WEIGHT_DTYPE)
    for module in converted.modules():
        if type(module) is nnqd.Linear:
            _exact_inputs(module)
    return converted


def quantized_layers(converted: nn.Module) -> list[tuple[nn.Module, nn.Module | None]]:
    """``(quantized Linear, quantized LayerNorm or None)`` per ``Linear`` of a converted trunk,
    in order (``LinearReLU`` counts as a ``Linear``; a dynamic trunk's norms stay fp32: None)."""
    return _with_norms(converted.modules(), (nnq.Linear, nnqd.Linear), nnq.LayerNorm)


def observed_layers(prepared: nn.Module) -> list[tuple[nn.Module, nn.Module | None]]:
    """``(observed Linear or LinearReLU, observed LayerNorm or None)`` per ``Linear`` of a
    module made by :func:`calibrate_static`, in order."""
    return _with_norms(prepared.trunk, (nn.Linear, nni.LinearReLU), nn.LayerNorm)


def _with_norms(modules, linear_types: tuple[type, ...], norm_type: type) -> list[tuple[nn.Module, nn.Module | None]]:
    """Each module of ``linear_types`` in ``modules``, with the ``norm_type`` after it (or None)."""
    layers: list[list] = []
    for module in modules:
        if isinstance(module, linear_types):
            layers.append([module, None])
        elif isinstance(module, norm_type):
            layers[-1][1] = module
    return [(linear, norm) for linear, norm in layers]


def observed_linear(module: nn.Module) -> dict[str, torch.Tensor]:
    """What ``tq.convert`` makes of an observed ``Linear`` (``nnq.Linear.from_float``: the
    weight observed and quantized, the output qparams from its observer), as plain codes, but
    without packing the weights for a kernel and unpacking them again (the actors pack the
    codes they load): at QuaRL's 2048x3 width that pack and unpack were most of a push
    (docs/algorithms/ppo.md measures it)."""
    linear = module[0] if isinstance(module, nni.LinearReLU) else module
    observer = module.qconfig.weight()
    observer(linear.weight)
    return {**weight_codes(_quantize_weight(linear.weight.float(), observer), linear.bias),
            **observed_qparams(module)}


def observed_qparams(module: nn.Module) -> dict[str, torch.Tensor]:
    """The output scale and zero point an observed module's quantized form gets."""
    scale, zero_point = module.activation_post_process.calculate_qparams()
    return {"scale": torch.tensor([float(scale)]), "zero_point": torch.tensor([int(zero_point)], dtype=torch.int32)}


def linear_codes(module: nn.Module) -> dict[str, torch.Tensor]:
    """The int8 weight codes, scales, zero points and fp32 bias of a quantized ``Linear``."""
    weight, bias = module._weight_bias()  # one unpack of the packed params, not two
    return weight_codes(weight, bias)


def weight_codes(weight: torch.Tensor, bias: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The codes, scales and zero points of a quantized ``weight``, and the fp32 ``bias``."""
    if bias is None:
        bias = torch.zeros(weight.shape[0])
    if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        scale = weight.q_per_channel_scales()
        zero_point = weight.q_per_channel_zero_points()
    else:
        scale = torch.tensor([weight.q_scale()])
        zero_point = torch.tensor([weight.q_zero_point()])
    return {
        "weight": weight.int_repr().clone(),
        "weight_scale": scale.float().reshape(-1),
        "weight_zero_point": zero_point.to(torch.int32).reshape(-1),
        "bias": bias.detach().float().clone(),
    }


def layer_norm_params(module: nn.Module) -> dict[str, torch.Tensor]:
    """The fp32 weight and bias of a (quantized or float) ``LayerNorm``."""
    return {"weight": module.weight.detach().float().clone(), "bias": module.bias.detach().float().clone()}


# ---------------------------------------------------------------------------- worker side


# ENGINES: the int8 kernel libraries torch was built with. Packed weights remember the engine
# they were packed for and run its kernels whatever the process-wide setting is later.
DEFAULT_ENGINE = "x86" if "x86" in ENGINES else (ENGINES[0] if ENGINES else "none")


@contextmanager
def packing_engine(engine: str) -> Iterator[None]:
    """Packs the int8 weights of modules built in the block for ``engine``'s kernels
    (``x86``/``fbgemm``: AVX2/AVX-512 VNNI; ``onednn``: also AMX int8 tiles), then restores
    the process-wide engine."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


@functools.cache
def saturates_full_range(engine: str) -> bool:
    """Whether ``engine``'s int8 ``Linear`` kernel, on this CPU, loses sums of full-range
    (8-bit) inputs, measured once per process: x86/fbgemm kernels without AVX-512 VNNI
    multiply pairs of inputs into 16-bit sums that saturate, so inputs keep 7 bits there;
    with VNNI (or another exact path) they get all 8, which halves their rounding error.

    An MLP's static int8 payload records the ranges the learner's CPU chose: actors on another
    CPU (a Ray cluster) should match it, or run ``quant.engine`` kernels that it measured. A
    convolutional copy's payload holds 8-bit ranges, which each actor keeps or re-expresses
    on 7 bits for its own CPU (:func:`actorq.quant.conv.reduces_activation_range`).
    """
    if engine not in ENGINES:
        return True
    width, code = 64, 127
    exact = FULL_ACTIVATION_MAX * code * width
    out_scale = exact / 200  # the exact sum lands on output code 200; a saturated one near 100
    with packing_engine(engine):
        linear = static_linear(torch.full((1, width), code, dtype=torch.int8), torch.ones(1),
                               torch.zeros(1, dtype=torch.int32), torch.zeros(1), out_scale, 0, relu=False)
        inputs = torch.quantize_per_tensor(torch.full((1, width), float(FULL_ACTIVATION_MAX)), 1.0, 0,
                                           ACTIVATION_DTYPE)
        out = float(linear(inputs).dequantize())
    return abs(out - exact) > out_scale


def kernels_saturate(spec: QuantSpec) -> bool:
    """Whether the int8 kernels ``spec``'s MLP copy runs lose sums of 8-bit activations on
    this CPU: oneDNN's on plain tensors (:mod:`actorq.quant.onednn`) where ``spec`` names no
    engine, else the named torch.ao engine's."""
    from actorq.quant import onednn

    if onednn.serves(spec):
        return onednn.saturates_full_range()
    return saturates_full_range(spec.engine or DEFAULT_ENGINE)


def quantized_weight(codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
    """A ``qint8`` tensor wrapping plain int8 codes with their scales and zero points."""
    if scale.numel() == 1:
        return torch._make_per_tensor_quantized_tensor(codes, float(scale), int(zero_point))
    return torch._make_per_channel_quantized_tensor(codes, scale.double(), zero_point.to(torch.int64), 0)


def _with_weight(cls: type, codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor,
                 bias: torch.Tensor, **kwargs) -> nn.Module:
    out_features, in_features = codes.shape
    # Built 1x1 first: the constructor would otherwise pack a full-size zero matrix that
    # set_weight_bias immediately replaces (tens of ms at width 2048, on every push).
    module = cls(1, 1, **kwargs)
    module.set_weight_bias(quantized_weight(codes, scale, zero_point), bias.float())
    module.in_features, module.out_features = in_features, out_features
    return module


def static_linear(
    codes: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor,
    bias: torch.Tensor,
    out_scale: float,
    out_zero_point: int,
    relu: bool,
) -> nn.Module:
    """A quantized ``Linear`` (or fused ``LinearReLU``) with quint8 input and output."""
    module = _with_weight(nniq.LinearReLU if relu else nnq.Linear, codes, scale, zero_point, bias)
    module.scale = float(out_scale)
    module.zero_point = int(out_zero_point)
    return module


class DynamicLinear(nnqd.Linear if AVAILABLE else nn.Module):
    """torch.ao's dynamically quantized ``Linear``, its inputs quantized on all 8 bits where
    the kernel of the engine it was packed for sums them exactly on this CPU
    (:func:`saturates_full_range`); torch's own always takes 7."""

    reduce_range = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self._packed_params._packed_params
        return torch.ops.quantized.linear_dynamic(x, packed, reduce_range=self.reduce_range).to(x.dtype)


def _exact_inputs(module: nnqd.Linear) -> DynamicLinear:
    """``module`` as a :class:`DynamicLinear` for the engine packing now."""
    module.__class__ = DynamicLinear
    module.reduce_range = saturates_full_range(torch.backends.quantized.engine)
    return module


def dynamic_linear(
    codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, bias: torch.Tensor
) -> nn.Module:
    """A dynamically quantized ``Linear``: int8 weights, fp32 in and out."""
    return _exact_inputs(_with_weight(nnqd.Linear, codes, scale, zero_point, bias, dtype=WEIGHT_DTYPE))


def static_layer_norm(
    weight: torch.Tensor, bias: torch.Tensor, eps: float, out_scale: float, out_zero_point: int
) -> nn.Module:
    """A quantized ``LayerNorm`` over the last dimension."""
    return nnq.LayerNorm(
        weight.shape[0],
        nn.Parameter(weight.float().clone(), requires_grad=False),
        nn.Parameter(bias.float().clone(), requires_grad=False),
        float(out_scale),
        int(out_zero_point),
        eps=eps,
    )


def quantize_input(scale: float, zero_point: int) -> nn.Module:
    """fp32 -> quint8 with fixed qparams."""
    return nnq.Quantize(float(scale), int(zero_point), ACTIVATION_DTYPE)


def dequantize() -> nn.Module:
    return nnq.DeQuantize()


# ---------------------------------------------------------------------------- FX graph mode

REDUCED_RANGE_ENGINES = ("x86", "fbgemm")
"""Engines whose default recipe keeps activations to 7 bits (``reduce_range``)."""


FX_OBSERVERS = {"minmax": "MinMaxObserver", "moving_average": "MovingAverageMinMaxObserver",
                "histogram": "HistogramObserver"}
"""The activation observer (of ``torch.ao.quantization.observer``) of each ``quant.calibration``
for FX graph mode (torch.ao's recipe: histogram)."""


def fx_qconfig_mapping(engine: str, full_range: bool, calibration: str = "histogram",
                       fp32_modules: Sequence[str] = (), fp32_ops: Sequence[Callable] = ()) -> tq.QConfigMapping:
    """torch.ao's default FX recipe for ``engine`` (per-channel weights), its activations
    calibrated by ``calibration``'s observer (the recipe's own: histogram) on 8 bits if
    ``full_range``, else on the engine's default (7 for x86 and fbgemm); the submodules named
    in ``fp32_modules`` and the functions in ``fp32_ops`` (e.g. ``operator.mul``) stay fp32."""
    mapping = tq.get_default_qconfig_mapping(engine)
    reduce_range = engine in REDUCED_RANGE_ENGINES and not full_range
    if calibration != "histogram" or (full_range and engine in REDUCED_RANGE_ENGINES):
        mapping.set_global(tq.QConfig(activation=getattr(tqo, FX_OBSERVERS[calibration]).with_args(reduce_range=reduce_range),
                                      weight=tqo.default_per_channel_weight_observer))
    for name in fp32_modules:
        mapping.set_module_name(name, None)
    for op in fp32_ops:
        mapping.set_object_type(op, None)
    return mapping


def convert_static_fx(model: nn.Module, calibration: list[torch.Tensor], engine: str, full_range: bool,
                      observer: str = "histogram", fp32_modules: Sequence[str] = (),
                      fp32_ops: Sequence[Callable] = ()) -> nn.Module:
    """``model`` (changed in place) traced, observed on each batch of ``calibration`` (with
    ``observer``, a key of :data:`FX_OBSERVERS`) and converted to static int8 for ``engine``:
    conv/linear + ReLU fused, per-channel weights, quantized adds. The submodules named in
    ``fp32_modules`` and the functions in ``fp32_ops`` stay fp32, the convolutions among them
    channels-last (where torch's fp32 kernels are fastest).

    torch.ao draws from the global random generator while it converts (the modules it
    builds initialise their weights); the generator is restored after, so the learner's
    draws (minibatch order, exploration) do not depend on whether, or how often, the
    actors' copy is converted."""
    with packing_engine(engine), torch.random.fork_rng(devices=[]):
        mapping = fx_qconfig_mapping(engine, full_range, observer, fp32_modules, fp32_ops)
        prepared = prepare_fx(model, mapping, example_inputs=(calibration[0][:1],))
        for batch in calibration:
            prepared(batch)
        converted = convert_fx(prepared)
    for module in converted.modules():
        if type(module) is nn.Conv2d:  # left fp32 (quantized convolutions are other types)
            module.to(memory_format=torch.channels_last)
    return converted


def reduced_activation_range(state: Mapping[str, object]) -> dict[str, object]:
    """The ``state_dict()`` of a module :func:`convert_static_fx` made with every activation
    range it was calibrated to on 8 bits (codes 0..255) kept, on 7 (0..127): what torch's
    ``reduce_range`` observers give for the same observed range (theirs choose the range on
    256 bins either way). Weights and the rest of the state are left as they are.

    Example:
        >>> model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2))
        >>> converted = convert_static_fx(model, [torch.rand(4, 1, 4, 4)], DEFAULT_ENGINE, full_range=True)
        >>> state, reduced = converted.state_dict(), reduced_activation_range(converted.state_dict())
        >>> [round(float(reduced[key] / state[key]), 4) for key in ("0_input_scale_0", "3.scale")]
        [2.0079, 2.0079]
        >>> int(reduced["3.zero_point"]) == round(int(state["3.zero_point"]) * 127 / 255)
        True
    """
    reduced = collections.OrderedDict(state)
    reduced._metadata = getattr(state, "_metadata", None)  # type: ignore[attr-defined]  # modules' versions
    for key, value in state.items():
        zero_point = _activation_zero_point(key)
        if zero_point in state and isinstance(value, torch.Tensor) and not value.is_quantized:
            reduced[key] = value * (FULL_ACTIVATION_MAX / REDUCED_ACTIVATION_MAX)
            codes = state[zero_point]
            reduced[zero_point] = torch.round(codes * (REDUCED_ACTIVATION_MAX / FULL_ACTIVATION_MAX)).to(codes.dtype)
    return reduced


def _activation_zero_point(key: str) -> str | None:
    """The key of the zero point beside ``key`` in a converted module's state where ``key``
    is an activation's scale (a quantized module's ``scale``, a quantize node's
    ``..._scale_N``), else None."""
    head, dot, last = key.rpartition(".")
    if last == "scale":
        return f"{head}{dot}zero_point"
    stem, marker, index = last.rpartition("_scale_")
    if marker and index.isdigit():
        return f"{head}{dot}{stem}_zero_point_{index}"
    return None


def plain_tensors(name: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    """``tensor`` as plain tensors: itself when it is not quantized, else its int codes
    under ``name`` and its scales and zero points beside them."""
    tensor = tensor.detach()
    if not tensor.is_quantized:
        return {name: tensor.clone()}
    if tensor.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        return {name: tensor.int_repr().clone(), f"{name}__scales": tensor.q_per_channel_scales().clone(),
                f"{name}__zero_points": tensor.q_per_channel_zero_points().clone()}
    return {name: tensor.int_repr().clone(), f"{name}__scale": torch.tensor(tensor.q_scale(), dtype=torch.float64),
            f"{name}__zero_point": torch.tensor(tensor.q_zero_point(), dtype=torch.int64)}


def restored_tensor(name: str, template: torch.Tensor, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """The tensor :func:`plain_tensors` split into ``tensors``, quantized as ``template`` is."""
    if not template.is_quantized:
        return tensors[name]
    codes = tensors[name]
    if template.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        return torch._make_per_channel_quantized_tensor(
            codes, tensors[f"{name}__scales"], tensors[f"{name}__zero_points"], template.q_per_channel_axis())
    return torch._make_per_tensor_quantized_tensor(
        codes, float(tensors[f"{name}__scale"]), int(tensors[f"{name}__zero_point"]))
