"""``python -m actorq.bench NAME [options]``: run one benchmark (``--help`` on each for options)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "learner": "Lightning learner vs a bare PyTorch loop: updates per second",
    "inference": "µs per actor forward: fp32 vs bf16 vs int8 static/dynamic vs auto",
    "actors": "env frames/s of real collector workers, fp32 vs int8 policy",
    "replay": "prioritized replay vs cpprb and TorchRL",
    "learning": "reference learning runs, fp32 vs int8 actors, side by side",
    "recipes": "greedy returns of one trained policy under each int8 recipe",
    "regime": "where int8 actors pay here: predicted speedup map, checked by real runs",
    "scaleout": "Ray actors vs local processes: frames/s, and the int8 broadcast over Ray",
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    available = {name: text for name, text in BENCHMARKS.items() if _exists(name)}
    if not argv or argv[0] not in available:
        lines = "\n".join(f"  {name:<10} {text}" for name, text in available.items())
        print(f"usage: python -m actorq.bench NAME [options]\n\nbenchmarks:\n{lines}", file=sys.stderr)
        sys.exit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    importlib.import_module(f"actorq.bench.{argv[0]}").main(argv[1:])


def _exists(name: str) -> bool:
    return importlib.util.find_spec(f"actorq.bench.{name}") is not None


if __name__ == "__main__":
    main()
