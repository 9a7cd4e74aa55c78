"""Shared output of the benchmarks: a plain-text table on stdout and the same rows as JSON.

Example:
    >>> report("demo", [{"width": 256, "fp32_us": 41.2}], out=None)
    demo
    width  fp32_us
    -----  -------
    256    41.2
"""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


def report(name: str, rows: Sequence[dict[str, Any]], out: str | Path | None) -> None:
    """Prints ``rows`` as a table titled ``name`` and, if ``out`` is set, writes them as JSON.

    Args:
        name: the benchmark's name (table title and the JSON's ``"name"``).
        rows: one dict per row; the first row's keys are the columns.
        out: JSON file to write (parent directories are created), or ``None``.
    """
    print(name)
    print(format_table(rows))
    if out is not None:
        write_json(name, rows, out)


def write_json(name: str, rows: Sequence[dict[str, Any]], out: str | Path, **fields: Any) -> None:
    """Writes ``rows`` to ``out`` as the benchmark ``name``'s JSON, with this machine's versions
    and any further top-level ``fields`` (e.g. a second table, the machine)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"name": name, "environment": _environment(), **fields, "rows": list(rows)}
    path.write_text(json.dumps(document, indent=2) + "\n")


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Left-aligned columns separated by two spaces, floats with 3 significant digits."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    lines = [columns, ["-" * w for w in widths], *cells]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _environment() -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }
