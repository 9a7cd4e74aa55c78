"""How a run is put together around ``actorq.train``: the checks before it starts (``checks``),
the command line's launch and sweeps (``launch``), console logging (``console``), resuming from
a checkpoint (``resume``), the learner's precision chosen by measurement
(``learner_precision``), learner ranks (``parallel``) and the frame clock the learner and the
experience pipeline share (``clock``)."""
