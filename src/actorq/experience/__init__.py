"""The experience pipeline the Trainer owns (:mod:`actorq.experience.pipeline`): it starts
the actors, feeds the learner their batches (through a replay, or as rollouts) and publishes
the learner's weights to them."""

from actorq.experience.pipeline import CALIBRATION_OBSERVATIONS, Experience

__all__ = ["CALIBRATION_OBSERVATIONS", "Experience"]
