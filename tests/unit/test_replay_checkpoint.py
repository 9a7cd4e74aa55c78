"""``replay.checkpoint=true``: a replay's state holds its transitions, priorities and write
position as plain tensors (``weights_only``), and a fresh buffer loaded from it samples and
fills exactly as the saved one would have; without the flag no transition is saved."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from actorq.data.replay import make_replay

KINDS = {"uniform": {}, "prioritized": {"prioritized": True}, "shared": {"prioritized": True, "shared": True}}


def rows(n: int, start: int = 0) -> TensorDict:
    values = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict({"observation": values.unsqueeze(-1).repeat(1, 3), "action": torch.zeros(n, 1, dtype=torch.int64),
                       "reward": values, "next_observation": torch.zeros(n, 3), "discount": torch.ones(n)}, [n])


def make(kind: str, checkpoint: bool = True):
    return make_replay(capacity=50, checkpoint=checkpoint, template=rows(1)[0], beta_annealing_steps=100, seed=3,
                       **KINDS[kind])


def saved_and_loaded(replay, tmp_path):
    torch.save(replay.state_dict(), tmp_path / "replay.pt")
    return torch.load(tmp_path / "replay.pt", weights_only=True)


@pytest.mark.parametrize("kind", KINDS)
def test_a_loaded_replay_continues_as_the_saved_one(kind, tmp_path):
    saved = make(kind)
    saved.extend(rows(30))
    saved.extend(rows(40, start=30))  # wrapped around: the next write goes to slot 20
    sample = saved.sample(8)
    saved.update_priorities(sample.indices, torch.rand(8, generator=torch.Generator().manual_seed(0)))
    loaded = make(kind)
    loaded.load_state_dict(saved_and_loaded(saved, tmp_path))
    assert len(loaded) == len(saved) == 50
    slots = torch.arange(50)
    assert torch.equal(loaded.storage.read(slots)["reward"], saved.storage.read(slots)["reward"])
    if kind != "uniform":
        assert np.array_equal(loaded.priorities.tree.values(slots.numpy()), saved.priorities.tree.values(slots.numpy()))
    for replay in (saved, loaded):  # the next writes land in the same slots
        replay.extend(rows(5, start=1000))
    assert torch.equal(loaded.storage.read(slots)["reward"], saved.storage.read(slots)["reward"])
    first, second = saved.sample(16), loaded.sample(16)
    assert torch.equal(first.indices, second.indices) and torch.equal(first.weights, second.weights)


@pytest.mark.parametrize("kind", KINDS)
def test_without_replay_checkpoint_no_transition_is_saved(kind, tmp_path):
    replay = make(kind, checkpoint=False)
    replay.extend(rows(20))
    state = saved_and_loaded(replay, tmp_path)
    assert "contents" not in state
    fresh = make(kind, checkpoint=False)
    fresh.load_state_dict(state)
    assert len(fresh) == 0


def test_a_shared_slot_a_writer_started_overwriting_is_saved_empty(tmp_path):
    replay = make("shared")
    replay.extend(rows(10))
    len(replay)  # the learner syncs: ten slots published
    replay._stamps[3] = -2  # a writer has started on slot 3 (stamp WRITING) and not finished
    loaded = make("shared")
    loaded.load_state_dict(saved_and_loaded(replay, tmp_path))
    assert len(loaded) == 9
    assert 3 not in loaded.sample(64).indices.tolist()
