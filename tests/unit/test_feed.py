"""Both experience feeds are :class:`~actorq.experience.feed.Feed` s: every member the
pipeline asks of a feed, with the protocol's parameters, and nothing replay-only on the
rollout feed."""

import inspect

import pytest

from actorq.experience.feed import Feed
from actorq.experience.replay_feed import ReplayFeed
from actorq.experience.rollout_feed import RolloutFeed

METHODS = [name for name, member in vars(Feed).items() if inspect.isfunction(member) and not name.startswith("_")]


@pytest.mark.parametrize("feed", [ReplayFeed, RolloutFeed])
def test_a_feed_has_every_member_of_the_protocol_with_its_parameters(feed):
    assert isinstance(feed.kind, str)
    for name in METHODS:
        expected = list(inspect.signature(getattr(Feed, name)).parameters)
        assert list(inspect.signature(getattr(feed, name)).parameters) == expected, name


def test_the_rollout_feed_carries_nothing_of_a_replay():
    assert not {"replay", "writer", "sampling"} & set(dir(RolloutFeed()))
