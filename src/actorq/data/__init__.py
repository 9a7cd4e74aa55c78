"""The data path from the actors to the learner: for off-policy learners the replay
(``replay``), the n-step transitions (``nstep``) and the writer that stores them (``writer``),
and how learner ranks share the replay's batches (``learner_ranks``)."""
