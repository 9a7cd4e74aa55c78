"""The one rule by which actorq picks a precision by measurement: the actors' (``quant.bits=auto``,
:func:`actorq.quant.auto.choose`) and the learner's (``trainer.precision=auto``,
:func:`actorq.run.learner_precision.choose`)."""

from __future__ import annotations

MARGIN = 0.05
"""How much faster than the reference a candidate must be to replace it: within it, the
full-precision reference is kept (a timing difference that small is noise, and keeps nothing)."""


def fastest(timings: dict[str, float], reference: str, margin: float = MARGIN) -> str:
    """The fastest of ``timings`` if it beats ``reference`` by ``margin``, else ``reference``.

    Example:
        >>> fastest({"fp32": 100.0, "int8": 20.0, "bf16": 50.0}, "fp32")
        'int8'
        >>> fastest({"fp32": 100.0, "int8": 96.0}, "fp32")  # within 5%: the reference stays
        'fp32'
    """
    best = min(timings, key=timings.__getitem__)
    return best if timings[best] <= (1.0 - margin) * timings[reference] else reference
