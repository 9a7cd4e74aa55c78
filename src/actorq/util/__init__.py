"""Small pieces every package uses: the project's errors (``errors``), atomic file writes
(``atomic``) and the guard against non-finite losses and weights (``finite``)."""
