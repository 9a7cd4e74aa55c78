import numpy as np
import pytest
import torch
from tensordict import TensorDict

from actorq.data.replay.base import TRANSITION_KEYS
from actorq.data.replay.prioritized import PrioritizedReplay
from actorq.data.replay.priorities import Priorities

# Upper 0.1% point of the chi-square distribution with 7 degrees of freedom.
CHI2_7_DOF_999 = 24.322


def transitions(ids) -> TensorDict:
    """Rows whose every field encodes the row's id."""
    ids = torch.as_tensor(ids, dtype=torch.float32)
    n = len(ids)
    return TensorDict(
        {
            "observation": ids[:, None].expand(n, 3).clone(),
            "action": ids[:, None].expand(n, 2).clone(),
            "reward": ids.clone(),
            "next_observation": ids[:, None].expand(n, 3).clone(),
            "discount": ids.clone(),
        },
        batch_size=[n],
    )


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = counts.sum() * probabilities
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"capacity": 0}, "capacity must be positive"),
        ({"alpha": -0.1}, "alpha must be >= 0"),
        ({"beta": 1.5}, r"beta must be in \[0, 1\]"),
        ({"beta": -0.1}, r"beta must be in \[0, 1\]"),
        ({"beta_annealing_steps": -1}, "beta_annealing_steps must be >= 0"),
        ({"fanout": 6}, "fanout must be a power of two"),
        ({"eps": -1e-3}, "eps must be >= 0"),
    ],
)
def test_rejects_invalid_arguments_with_a_clear_message(arguments, message):
    with pytest.raises(ValueError, match=message):
        PrioritizedReplay(**{"capacity": 10, **arguments})


def test_sample_returns_whole_rows_with_indices_and_weights():
    buffer = PrioritizedReplay(capacity=50)
    buffer.extend(transitions(range(20)))
    sample = buffer.sample(8)
    assert set(sample.batch.keys()) == set(TRANSITION_KEYS)
    assert sample.batch["observation"].shape == (8, 3)
    assert sample.indices.dtype == torch.int64
    assert sample.weights.dtype == torch.float32 and sample.weights.shape == (8,)
    stored_ids = sample.indices.float()  # row i holds id i: nothing has wrapped around
    for key in TRANSITION_KEYS:
        values = sample.batch[key].reshape(8, -1)
        torch.testing.assert_close(values, stored_ids[:, None].expand_as(values))


def test_sampling_an_empty_buffer_raises():
    with pytest.raises(RuntimeError, match="empty"):
        PrioritizedReplay(capacity=10).sample(4)


@pytest.mark.parametrize("batch_size", [1, 32])
def test_sampling_frequencies_follow_priority_to_the_alpha(batch_size):
    alpha = 0.7
    priorities = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 0.1, 6.0, 8.0])
    buffer = PrioritizedReplay(capacity=8, alpha=alpha, eps=0.0, fanout=2, seed=1)
    buffer.extend(transitions(range(8)))
    buffer.update_priorities(torch.arange(8), torch.from_numpy(priorities))
    counts = np.zeros(8)
    for _ in range(32_000 // batch_size):
        np.add.at(counts, buffer.sample(batch_size).indices.numpy(), 1)
    expected = priorities**alpha / (priorities**alpha).sum()
    assert chi_square(counts, expected) < CHI2_7_DOF_999
    # The test has power: the same counts are far from what alpha = 1 would give.
    assert chi_square(counts, priorities / priorities.sum()) > 10 * CHI2_7_DOF_999


def test_importance_weights_follow_the_annealed_beta():
    buffer = PrioritizedReplay(
        capacity=4, alpha=0.5, beta=0.4, beta_annealing_steps=10, eps=0.0, seed=0
    )
    buffer.extend(transitions(range(4)))
    buffer.update_priorities(torch.arange(4), torch.tensor([1.0, 4.0, 9.0, 16.0]))
    scaled = np.array([1.0, 2.0, 3.0, 4.0])  # priority ** alpha; N * P(i) is proportional
    for step in range(12):
        beta = 0.4 + 0.6 * min(step, 10) / 10
        assert buffer.beta == pytest.approx(beta)
        sample = buffer.sample(16)
        # (N * P(i))^-beta / max_j (N * P(j))^-beta, the maximum being at the smallest P.
        expected = (scaled[sample.indices.numpy()] / scaled.min()) ** -beta
        np.testing.assert_allclose(sample.weights.numpy(), expected, rtol=1e-6)
    assert buffer.beta == 1.0


def test_zero_annealing_steps_mean_beta_is_one_from_the_start():
    assert PrioritizedReplay(capacity=4, beta=0.2, beta_annealing_steps=0).beta == 1.0


def test_new_transitions_get_the_largest_priority_seen():
    alpha = 0.6
    buffer = PrioritizedReplay(capacity=10, alpha=alpha, eps=0.0)
    buffer.extend(transitions(range(2)))
    leaves = buffer.priorities.tree.values
    np.testing.assert_allclose(leaves(np.arange(2)), [1.0, 1.0])  # the default before updates
    buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([5.0, 0.5]))
    buffer.update_priorities(torch.tensor([0]), torch.tensor([2.0]))  # the maximum stays 5
    buffer.extend(transitions([2, 3]))
    expected = np.array([2.0, 0.5, 5.0, 5.0]) ** alpha
    np.testing.assert_allclose(leaves(np.arange(4)), expected, rtol=1e-6)


def test_wrap_around_overwrites_the_oldest_slots_and_resets_their_priority():
    buffer = PrioritizedReplay(capacity=5, eps=0.0)
    buffer.extend(transitions([0, 1, 2]))
    buffer.update_priorities(torch.tensor([0]), torch.tensor([0.0]))  # id 0: never drawn
    buffer.extend(transitions([3, 4, 5, 6]))  # fills slots 3, 4, then wraps to 0, 1
    assert len(buffer) == 5
    sampled = buffer.sample(500)
    ids = sampled.batch["reward"]
    assert set(ids.tolist()) == {2.0, 3.0, 4.0, 5.0, 6.0}
    slot_of_id = {5.0: 0, 6.0: 1, 2.0: 2, 3.0: 3, 4.0: 4}
    assert [slot_of_id[i] for i in ids.tolist()] == sampled.indices.tolist()


def test_a_batch_larger_than_the_capacity_keeps_its_last_rows():
    buffer = PrioritizedReplay(capacity=4)
    buffer.extend(transitions(range(10)))
    assert len(buffer) == 4
    assert set(buffer.sample(100).batch["reward"].tolist()) == {6.0, 7.0, 8.0, 9.0}


def test_alpha_zero_samples_uniformly_with_unit_weights():
    buffer = PrioritizedReplay(capacity=4, alpha=0.0)
    buffer.extend(transitions(range(4)))
    buffer.update_priorities(torch.arange(4), torch.tensor([0.1, 1.0, 10.0, 100.0]))
    sample = buffer.sample(400)
    assert np.bincount(sample.indices.numpy()).tolist() == [100, 100, 100, 100]  # stratified
    assert (sample.weights == 1).all()


@pytest.mark.parametrize("priority", [-1.0, float("nan"), float("inf")])
def test_rejects_invalid_priorities(priority):
    buffer = PrioritizedReplay(capacity=4)
    buffer.extend(transitions(range(4)))
    with pytest.raises(ValueError, match="finite and non-negative"):
        buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0, priority]))


@pytest.mark.parametrize("index", [-1, 3])
def test_rejects_indices_outside_the_stored_transitions(index):
    buffer = PrioritizedReplay(capacity=4)
    buffer.extend(transitions(range(3)))
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 3\)"):
        buffer.update_priorities(torch.tensor([index]), torch.tensor([1.0]))


@pytest.mark.parametrize("index", [-1, 4])
def test_a_full_buffer_rejects_indices_outside_it_and_changes_nothing(index):
    buffer = PrioritizedReplay(capacity=4, alpha=1.0, eps=0.0)
    buffer.extend(transitions(range(4)))
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 4\)"):
        buffer.update_priorities(torch.tensor([0, index]), torch.tensor([5.0, 9.0]))
    assert buffer.priorities.tree.values(np.arange(4)).tolist() == [1.0] * 4
    assert buffer.priorities.max_priority == 1.0


def test_state_dict_restores_beta_progress_max_priority_and_the_generator():
    buffer = PrioritizedReplay(capacity=8, beta_annealing_steps=100)
    buffer.extend(transitions(range(8)))
    buffer.update_priorities(torch.tensor([3]), torch.tensor([7.0]))
    for _ in range(5):
        buffer.sample(4)
    restored = PrioritizedReplay(capacity=8, beta_annealing_steps=100)
    restored.extend(transitions(range(8)))
    restored.update_priorities(torch.tensor([3]), torch.tensor([7.0]))
    restored.load_state_dict(buffer.state_dict())
    assert restored.beta == buffer.beta
    assert restored.priorities.max_priority == buffer.priorities.max_priority
    assert restored.sample(4).indices.tolist() == buffer.sample(4).indices.tolist()


# --- guards found by mutation testing (docs/mutation.md) ------------------------------


def draws(buffer: PrioritizedReplay) -> list[list[int]]:
    """Ten batches of three from eight equal slots: where in its stratum each draw falls
    depends on the generator (with as many draws as slots it would not)."""
    buffer.extend(transitions(range(8)))
    return [buffer.sample(3).indices.tolist() for _ in range(10)]


def test_defaults_are_the_papers():
    """Schaul et al.'s proportional variant: alpha 0.6, beta 0.4; a 16-ary tree, eps 1e-6."""
    for priorities in (Priorities(capacity=4), PrioritizedReplay(capacity=4).priorities):
        assert (priorities.alpha, priorities.initial_beta) == (0.6, 0.4)
        assert priorities.beta_annealing_steps == 100_000
        assert (priorities.tree.fanout, priorities.eps) == (16, 1e-6)
        assert priorities.rng.bit_generator.state == np.random.default_rng(0).bit_generator.state
    assert draws(PrioritizedReplay(capacity=8)) == draws(PrioritizedReplay(capacity=8, seed=0))


def test_the_seed_fixes_the_draws():
    def seeded(seed: int) -> PrioritizedReplay:
        return PrioritizedReplay(capacity=8, seed=seed)

    assert draws(seeded(7)) == draws(seeded(7))
    assert draws(seeded(7)) != draws(seeded(8))


def test_the_fanout_reaches_the_sum_tree():
    assert PrioritizedReplay(capacity=10, fanout=4).priorities.tree.fanout == 4


def test_argument_bounds_of_the_priorities():
    with pytest.raises(ValueError, match="replay capacity must be positive, got 0"):
        Priorities(capacity=0)
    assert Priorities(capacity=1).tree.capacity == 1
    for beta in (0.0, 1.0):
        assert Priorities(capacity=1, beta=beta, beta_annealing_steps=10).beta == beta


def test_eps_is_added_to_every_priority_and_to_the_largest_seen():
    alpha, eps = 0.5, 0.5
    buffer = PrioritizedReplay(capacity=4, alpha=alpha, eps=eps)
    buffer.extend(transitions(range(2)))
    buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([2.0, 0.0]))
    buffer.extend(transitions([2]))  # a new slot gets the largest priority seen, eps included
    expected = np.array([2.5, 0.5, 2.5]) ** alpha
    np.testing.assert_allclose(buffer.priorities.tree.values(np.arange(3)), expected, rtol=1e-6)


def test_half_precision_priorities_are_raised_to_alpha_in_full_precision():
    """A TD error from a learner under 16-bit precision gives the leaves a float32 one gives."""
    alpha, eps = 0.6, 1e-6
    half = torch.tensor([0.0, 0.001, 3.0, 1000.0], dtype=torch.float16)
    buffer = PrioritizedReplay(capacity=4, alpha=alpha, eps=eps)
    buffer.extend(transitions(range(4)))
    buffer.update_priorities(torch.arange(4), half)
    expected = (half.double().numpy() + eps) ** alpha
    np.testing.assert_allclose(buffer.priorities.tree.values(np.arange(4)), expected, rtol=1e-6)


def test_indices_and_priorities_may_be_numpy_arrays():
    buffer = PrioritizedReplay(capacity=4, alpha=1.0, eps=0.0)
    buffer.extend(transitions(range(4)))
    buffer.update_priorities(np.array([1, 3]), np.array([0.0, 4.0]))
    np.testing.assert_allclose(buffer.priorities.tree.values(np.array([1, 3])), [0.0, 4.0])


def test_slots_not_available_get_priority_zero():
    """The shared replay adds slots a writer has not finished as unavailable."""
    alpha = 0.5
    priorities = Priorities(capacity=4, alpha=alpha, eps=0.0)
    priorities.update(np.array([0]), np.array([9.0]))  # the largest priority seen is now 9
    priorities.add(np.array([1, 2, 3]), available=np.array([True, False, True]))
    np.testing.assert_allclose(priorities.tree.values(np.arange(4)), [3.0, 3.0, 0.0, 3.0])


def test_drawing_with_no_positive_priority_raises():
    priorities = Priorities(capacity=3, eps=0.0)
    priorities.add(np.arange(3))
    priorities.update(np.arange(3), np.zeros(3))
    with pytest.raises(RuntimeError, match="cannot sample: no slot has a positive priority"):
        priorities.draw(2)


def test_a_total_priority_below_one_is_drawn_from():
    priorities = Priorities(capacity=4, alpha=1.0, eps=0.0)
    priorities.add(np.arange(4))
    priorities.update(np.arange(4), np.array([0.0, 0.25, 0.0, 0.0]))
    slots, probabilities = priorities.draw(3)
    assert slots.tolist() == [1, 1, 1] and probabilities.tolist() == [1.0, 1.0, 1.0]


def test_each_stratum_draws_its_own_uniform():
    """Two strata over four equal slots: stratum 0 holds slots 0-1, stratum 1 slots 2-3. With
    one uniform per stratum every pair turns up; one uniform shared by both gives only
    (0, 2) and (1, 3)."""
    priorities = Priorities(capacity=4, alpha=1.0, eps=0.0, seed=0)
    priorities.add(np.arange(4))
    pairs = {tuple(priorities.draw(2)[0].tolist()) for _ in range(100)}
    assert pairs == {(0, 2), (0, 3), (1, 2), (1, 3)}
