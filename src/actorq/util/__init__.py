"""Small pieces every package uses: the project's errors (``errors``), atomic file writes
(``atomic``), the guard against non-finite losses and weights (``finite``), the one rule
that picks a precision by measurement (``choice``), config values read below the run's checks
(``values``), the frame clock the learner and the experience pipeline share (``clock``) and
every private member of TorchRL the project touches (``torchrl_adapter``)."""
