"""Config values every layer reads, whatever checks them: ``"auto"`` and what counts as an
integer. They live below the packages that read them (the actors' precision in
:mod:`actorq.quant`, the run's checks in :mod:`actorq.run.checks`), so reading one imports no
config machinery.

Example:
    >>> is_int(3), is_int(True), is_int(3.0)
    (True, False, False)
"""

from __future__ import annotations

AUTO = "auto"
"""The value that lets the run pick for itself (``quant.bits``, ``trainer.precision``)."""


def is_int(value: object) -> bool:
    """An integer config value (YAML's ``true`` is a bool, not an integer)."""
    return isinstance(value, int) and not isinstance(value, bool)
