"""Where a results cell ran: the CPU (model, family, flags), its load average at the cell's
start and end, and the commit of the source tree.

Example:
    >>> import os
    >>> sorted(machine(os.getloadavg()))
    ['commit', 'cores', 'cpu', 'flags', 'load_end', 'load_start']
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from actorq.run.learner_precision import cpu_fields


def machine(load_start: tuple[float, float, float]) -> dict:
    """CPU model and flags, the load average at the cell's start and end, the commit."""
    info = cpu_fields()
    cpu = f"{info.get('model name')} (family {info.get('cpu family', '?')}, model {info.get('model', '?')})"
    return {"cpu": cpu, "cores": os.cpu_count(), "flags": info.get("flags", "").split(),
            "load_start": [round(x, 2) for x in load_start], "load_end": [round(x, 2) for x in os.getloadavg()],
            "commit": commit()}


def commit() -> str | None:
    """The source tree's commit (``+dirty`` with uncommitted changes), or None outside a checkout."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")
