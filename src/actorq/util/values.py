"""Config values every layer reads, whatever checks them: ``"auto"`` and what counts as an
integer. They live below the packages that read them (the actors' precision in
:mod:`actorq.quant`, the run's checks in :mod:`actorq.run.checks`), so reading one imports no
config machinery.

Example:
    >>> is_int(3), is_int(True), is_int(3.0)
    (True, False, False)
"""

from __future__ import annotations

import re
from typing import Any

AUTO = "auto"
"""The value that lets the run pick for itself (``quant.bits``, ``trainer.precision``)."""


def is_int(value: object) -> bool:
    """An integer config value (YAML's ``true`` is a bool, not an integer)."""
    return isinstance(value, int) and not isinstance(value, bool)


def override_value(value: Any) -> str:
    """A Python value as Hydra's override grammar writes it, quoted where it has to be.

    Example:
        >>> print(*(override_value(value) for value in (True, None, 2.5e-4, [16, 16], "runs/a", "a b, c")))
        true null 0.00025 [16,16] runs/a 'a b, c'
    """
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(override_value, value)) + "]"
    text = str(value)
    if re.fullmatch(r"[\w./@%+-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

