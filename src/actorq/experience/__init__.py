"""The experience pipeline the Trainer owns (:mod:`actorq.experience.pipeline`): it starts
the actors, feeds the learner their batches, through a replay
(:mod:`actorq.experience.replay_feed`) or as rollouts (:mod:`actorq.experience.rollout_feed`),
and pushes the learner's weights to them."""

from actorq.experience.pipeline import CALIBRATION_OBSERVATIONS, Experience, ExperienceSpec
from actorq.experience.replay_feed import ReplayFeed
from actorq.experience.rollout_feed import RolloutFeed

__all__ = ["CALIBRATION_OBSERVATIONS", "Experience", "ExperienceSpec", "ReplayFeed", "RolloutFeed"]
