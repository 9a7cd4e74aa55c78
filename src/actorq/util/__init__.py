"""Small pieces every package uses: the project's errors (``errors``), atomic file writes
(``atomic``), the guard against non-finite losses and weights (``finite``) and the one rule
that picks a precision by measurement (``choice``)."""
