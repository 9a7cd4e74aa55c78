"""Result files written whole or not at all: a reader (the report, a resumed run, a user's
script) never sees half a ``summary.json``, even if the run is killed while writing it.

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "summary.json"
    >>> write_text_atomically(path, json.dumps({"frames": 400}))
    >>> json.loads(path.read_text()), sorted(p.name for p in path.parent.iterdir())
    ({'frames': 400}, ['summary.json'])
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomically(path: Path, text: str) -> None:
    """Writes ``text`` to a temporary file beside ``path``, flushes it to disk, then renames
    it over ``path`` (a rename within one folder is atomic)."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
