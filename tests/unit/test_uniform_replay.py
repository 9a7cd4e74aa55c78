import pytest
import torch
from tensordict import TensorDict

from actorq.data.replay.uniform import UniformReplay


def rows(start, count):
    ids = torch.arange(start, start + count, dtype=torch.float32)
    return TensorDict(
        {"observation": ids.unsqueeze(-1).repeat(1, 3), "action": ids.unsqueeze(-1),
         "reward": ids, "next_observation": ids.unsqueeze(-1).repeat(1, 3), "discount": ids},
        batch_size=[count],
    )


def test_stores_and_samples_whole_rows():
    buffer = UniformReplay(capacity=50)
    buffer.extend(rows(0, 20))
    sample = buffer.sample(64)
    assert len(buffer) == 20
    ids = sample.batch["reward"]
    assert torch.equal(sample.batch["observation"][:, 0], ids)
    assert torch.equal(sample.batch["action"].squeeze(-1), ids)
    assert ids.max() < 20 and torch.equal(sample.weights, torch.ones(64))
    assert torch.equal(sample.batch["reward"], sample.indices.float())


def test_wraps_around_overwriting_the_oldest():
    buffer = UniformReplay(capacity=10)
    buffer.extend(rows(0, 8))
    buffer.extend(rows(8, 5))
    assert len(buffer) == 10
    stored = set(buffer.sample(500).batch["reward"].long().tolist())
    assert stored == set(range(3, 13))


def test_batch_larger_than_capacity_keeps_the_newest():
    buffer = UniformReplay(capacity=4)
    buffer.extend(rows(0, 10))
    assert set(buffer.sample(200).batch["reward"].long().tolist()) == {6, 7, 8, 9}


def test_errors():
    with pytest.raises(ValueError, match="capacity"):
        UniformReplay(capacity=0)
    with pytest.raises(RuntimeError, match="empty"):
        UniformReplay(capacity=3).sample(1)


@pytest.mark.parametrize("stored", [1000, 20_000], ids=["a large share", "a small share"])
def test_observations_are_drawn_uniformly_without_replacement(stored):
    """Each stored transition at most once, all of them as likely: 768 of 20k by distinct
    values of uniform draws, 768 of 1000 by a permutation."""
    buffer = UniformReplay(capacity=stored)
    buffer.extend(rows(0, stored))
    drawn = buffer.observations(768)[:, 0]
    assert len(drawn.unique()) == 768
    assert abs(float(drawn.mean()) - (stored - 1) / 2) < 0.06 * stored  # ~6 standard errors either side
    every = buffer.observations(stored + 10)[:, 0]  # more than it holds: every one, once
    assert torch.equal(every.sort().values, torch.arange(float(stored)))
