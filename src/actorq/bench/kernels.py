"""``actorq bench kernels``: µs per call of one int8 ``Linear`` (ReLU fused) on each engine.

One thread, one ``W x W`` layer of the same int8 codes (per-channel, symmetric), reading a
ReLU's output as an MLP's hidden layers do, at each width and batch:

* ``fp32_us``: ``F.linear`` then ReLU, the fp32 layer.
* ``ao_dynamic_us``: torch.ao's dynamic layer on its default engine (``x86``: fbgemm), fp32 in
  and out; the batch's coding is inside its kernel. ``ao_static_us``: torch.ao's static layer,
  quantized tensors in and out.
* ``plain_dynamic_us``: the plain engine's dynamic layer
  (:class:`~actorq.quant.onednn.DynamicInt8Linear`), fp32 in and out: the batch's range and
  codes (``plain_coding_us`` alone), then oneDNN's int8 matmul. ``plain_static_us``: that
  matmul alone, ``uint8`` codes in and out (:class:`~actorq.quant.onednn.Int8Linear`).

``dynamic_x`` and ``static_x`` are plain over torch.ao (above 1: plain faster). Where
``plain_static_us`` alone exceeds ``ao_dynamic_us``, no coding step, however fast, brings
the plain dynamic layer level with torch.ao's. The torch.ao columns are empty in a torch
without torch.ao's engines.

Usage (``tests/integration/test_bench_smoke.py`` runs the quick form)::

    actorq bench kernels [--quick] [--widths 256 2048] [--batches 1 16] [--out FILE.json]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from actorq.bench._table import report
from actorq.quant import _ao, onednn, plain_codes, time_forward
from actorq.util.arguments import as_options

WIDTHS, BATCHES = (256, 2048), (1, 16)
QUICK_WIDTHS, QUICK_BATCHES = (64,), (1, 4)


class _Call(nn.Module):
    """A callable as a module, for :func:`~actorq.quant.time_forward`."""

    def __init__(self, call: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.call = call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.call(x)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=None, help=f"layer widths (default {WIDTHS})")
    parser.add_argument("--batches", type=int, nargs="+", default=None, help=f"batch sizes (default {BATCHES})")
    parser.add_argument("--iterations", type=int, default=600, help="timed calls per kernel and cell")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each keeps its best median)")
    parser.add_argument("--quick", action="store_true", help="a small width and few calls (smoke test)")
    parser.add_argument("--out", default="bench-results/kernels.json", help="JSON output ('' for none)")
    args = parser.parse_args(as_options(argv, parser))
    if args.quick:
        args.widths, args.batches = args.widths or list(QUICK_WIDTHS), args.batches or list(QUICK_BATCHES)
        args.iterations, args.rounds = min(args.iterations, 30), 1
    if not onednn.available():
        parser.error("this torch build has no oneDNN int8 matmul (torch.ops.onednn.qlinear_pointwise)")
    args.widths, args.batches = args.widths or list(WIDTHS), args.batches or list(BATCHES)
    return args


def layers(width: int, x: torch.Tensor) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """Each kernel's layer of one random ``width x width`` weight, with the input it reads."""
    linear = nn.Linear(width, width)
    payload = plain_codes.weight_codes(linear.weight, linear.bias, per_channel=True)
    codes, scale, zero_point, bias = (payload[key] for key in ("weight", "weight_scale", "weight_zero_point", "bias"))
    in_scale, out_scale = float(x.amax()) / 255, float(torch.relu(linear(x)).amax()) / 255
    in_codes = onednn.quantize(x, in_scale, 0)
    dynamic = onednn.DynamicInt8Linear(codes, scale, zero_point, bias, relu=True, nonnegative_input=True)
    out = {"fp32": (_Call(lambda v: torch.relu(F.linear(v, linear.weight, linear.bias))), x),
           "plain_dynamic": (dynamic, x),
           "plain_coding": (_Call(lambda v: onednn.quantize_in_range(v, *onednn.nonnegative_qparams(v, 255))), x),
           "plain_static": (onednn.Int8Linear(codes, scale, bias, (in_scale, 0), (out_scale, 0), relu=True), in_codes)}
    if _ao.AVAILABLE:
        with _ao.packing_engine(_ao.DEFAULT_ENGINE):
            ao_dynamic = _ao.dynamic_linear(codes, scale, zero_point, bias)
            ao_static = _ao.static_linear(codes, scale, zero_point, bias, out_scale, 0, relu=True)
        out["ao_dynamic"] = (_Call(lambda v: torch.relu(ao_dynamic(v))), x)
        out["ao_static"] = (ao_static, _ao.quantize_input(in_scale, 0)(x))
    return out


def measure_cell(width: int, batch: int, args: argparse.Namespace) -> dict:
    """One (width, batch) row: each kernel's best median µs and plain's ratio to torch.ao's."""
    x = torch.relu(torch.randn(batch, width))
    timed = layers(width, x)
    best = {name: float("inf") for name in timed}
    with torch.no_grad():
        for _ in range(args.rounds):
            for name, (layer, inputs) in timed.items():
                timing = time_forward(layer, inputs, iterations=args.iterations, budget_s=1.0)
                best[name] = min(best[name], timing.median_us)
    row: dict = {"width": width, "batch": batch}
    for name in ("fp32", "ao_dynamic", "plain_dynamic", "plain_coding", "ao_static", "plain_static"):
        row[f"{name}_us"] = round(best[name], 1) if name in best else float("nan")
    row["dynamic_x"] = round(row["ao_dynamic_us"] / row["plain_dynamic_us"], 3)
    row["static_x"] = round(row["ao_static_us"] / row["plain_static_us"], 3)
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    """Runs the benchmark, prints the table, writes JSON; returns the rows."""
    args = parse_args(argv)
    torch.manual_seed(0)
    rows = [measure_cell(width, batch, args) for width in args.widths for batch in args.batches]
    engine = _ao.DEFAULT_ENGINE if _ao.AVAILABLE else "none"
    report(f"kernels: µs per call of one int8 Linear+ReLU, 1 thread (torch.ao: {engine}); *_x = torch.ao / plain",
           rows, args.out or None)
    return rows


if __name__ == "__main__":
    main()
