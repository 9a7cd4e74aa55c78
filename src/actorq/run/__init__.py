"""How a run is put together around ``actorq.train``: the checks before it starts (``checks``),
each object built from its config node and checked (``build``), the run plan (``plan``)
and the run's parts assembled in order from it (``assemble``), the command line's launch and
sweeps (``launch``), console logging (``console``), resuming from a checkpoint (``resume``)
and the learner's precision chosen by measurement (``learner_precision``)."""
