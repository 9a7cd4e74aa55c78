"""``actorq bench NAME [options]``: run one benchmark (``--help`` on each for options)."""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import sys
from typing import NoReturn

BENCHMARKS = {
    "learner": "Lightning learner vs a bare PyTorch loop: updates per second",
    "inference": "µs per actor forward: fp32 vs bf16 vs int8 static/dynamic vs auto",
    "kernels": "µs per call of one int8 Linear: torch.ao's kernels vs plain int8 tensors'",
    "actors": "env frames/s of real collector workers, fp32 vs int8 policy",
    "replay": "prioritized replay vs cpprb and TorchRL",
    "learning": "reference learning runs, fp32 vs int8 actors, side by side",
    "recipes": "greedy returns of one trained policy under each int8 recipe",
    "regime": "where int8 actors pay here: predicted speedup map, checked by real runs",
    "scaleout": "Ray actors vs local processes: frames/s, and the int8 push over Ray",
    "fleet": "Atari with a CNN policy: one actor core's frames/s and cost per frame, fp32 vs int8",
    "pixel_learner": "PPO's learner on Atari frames: frames/s it consumes, on this CPU or GPU",
    "export": "an exported policy's µs per forward and size: .pt2 vs TorchScript, fp32 vs int8",
}
# The results table against Stable-Baselines3 is a maintainers' harness outside the package:
# `python -m benchmarks.results` from the repository root (docs/results.md).


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    available = {name: text for name, text in BENCHMARKS.items() if _exists(name)}
    if argv[:1] in (["-h"], ["--help"]):
        _parser(available).print_help()
        sys.exit(0)
    if not argv or argv[0].startswith("-"):
        _error(f"name a benchmark first: {', '.join(available)} (--help describes them)")
    name = argv[0]
    if name not in available:
        close = difflib.get_close_matches(name, available, n=1)
        _error(f"unknown benchmark {name!r}" + (f" (did you mean {close[0]!r}?)" if close
                                                 else f"; choose from {', '.join(available)}"))
    importlib.import_module(f"actorq.bench.{name}").main(argv[1:])


def _parser(available: dict[str, str]) -> argparse.ArgumentParser:
    """The ``--help`` text (the benchmark's own options: ``NAME --help``)."""
    listing = "\n".join(f"  {name:<10} {text}" for name, text in available.items())
    return argparse.ArgumentParser(
        prog="actorq bench", usage="%(prog)s NAME [options]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Runs one benchmark: prints its table and writes it as JSON\n"
                    "(--out FILE, default bench-results/NAME.json; --quick: a seconds-long smoke run).\n"
                    "Each benchmark has its own options: actorq bench NAME --help.",
        epilog=f"benchmarks:\n{listing}\n\nexamples:\n"
               "  actorq bench learner --quick\n"
               "  actorq bench regime --help\n\n"
               "docs/benchmarks.md describes each benchmark and its measured results.",
    )


def _error(message: str) -> NoReturn:
    print(f"actorq.bench: error: {message}", file=sys.stderr)
    sys.exit(2)


def _exists(name: str) -> bool:
    return importlib.util.find_spec(f"actorq.bench.{name}") is not None


if __name__ == "__main__":
    main()
