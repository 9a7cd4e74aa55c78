"""The data path from the actors to the learner: the experience pipeline the Trainer owns
(``experience``), and for off-policy learners the replay (``replay``), the n-step transitions
(``nstep``) and the writer that stores them (``writer``)."""
