import numpy as np
import pytest

from actorq.data.replay.sumtree import SumTree

FANOUTS = [2, 4, 8, 16, 32]


def brute_force_find(leaves: np.ndarray, targets: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.cumsum(leaves, dtype=np.float64), targets, side="right")


def integer_leaves(capacity: int, seed: int) -> np.ndarray:
    """Small integers (zeros included): their float32 sums are exact, so the tree's answers
    can be compared with a brute-force search without rounding ties."""
    return np.random.default_rng(seed).integers(0, 5, capacity).astype(np.float64)


@pytest.mark.parametrize("fanout", [0, 1, 3, 12, 512])
def test_rejects_a_fanout_that_is_not_a_power_of_two_in_range(fanout):
    with pytest.raises(ValueError, match="fanout must be a power of two"):
        SumTree(capacity=10, fanout=fanout)


def test_rejects_an_empty_capacity():
    with pytest.raises(ValueError, match="capacity must be positive"):
        SumTree(capacity=0)


@pytest.mark.parametrize(
    ("capacity", "fanout", "depth"),
    [(1, 2, 0), (16, 4, 2), (17, 4, 3), (1000, 4, 5), (1000, 16, 3)],
)
def test_depth_is_the_ceiling_log_of_the_capacity_for_a_single_root(capacity, fanout, depth):
    assert SumTree(capacity, fanout, top_size=1).depth == depth


def test_levels_stop_at_the_first_one_within_top_size():
    assert SumTree(2**20, fanout=16, top_size=4096).depth == 2
    assert SumTree(4096, fanout=16, top_size=4096).depth == 0


@pytest.mark.parametrize("fanout", FANOUTS)
@pytest.mark.parametrize("capacity", [1, 7, 100, 1000])
def test_find_matches_brute_force_for_any_capacity(fanout, capacity):
    tree = SumTree(capacity, fanout, top_size=1)
    leaves = integer_leaves(capacity, seed=capacity)
    leaves[-1] = 1.0  # at least one positive leaf
    tree.update(np.arange(capacity), leaves)
    targets = np.arange(int(leaves.sum())) + 0.5  # one target inside each unit of mass
    np.testing.assert_array_equal(tree.find(targets), brute_force_find(leaves, targets))


@pytest.mark.parametrize("fanout", [4, 16])
def test_find_matches_brute_force_through_a_flat_top_level_at_exact_boundaries(fanout):
    """Targets on the boundaries between leaves (integer prefix sums) belong to the leaf on
    the right, in the flat top level's search as in the levels below it, whatever the
    targets' order."""
    capacity = 5000
    tree = SumTree(capacity, fanout, top_size=256)
    assert tree.depth >= 2  # a searched top level of many nodes, and levels below it
    leaves = integer_leaves(capacity, seed=fanout)
    tree.update(np.arange(capacity), leaves)
    targets = np.arange(int(leaves.sum()), dtype=np.float64)
    np.testing.assert_array_equal(tree.find(targets), brute_force_find(leaves, targets))
    shuffled = np.random.default_rng(fanout).permutation(targets)  # not in increasing order
    np.testing.assert_array_equal(tree.find(shuffled), brute_force_find(leaves, shuffled))


def test_fanouts_agree_on_every_answer():
    capacity = 3000  # not a power of any of the fanouts
    leaves = integer_leaves(capacity, seed=1)
    targets = np.arange(int(leaves.sum())) + 0.5
    answers = []
    for fanout in FANOUTS:
        tree = SumTree(capacity, fanout, top_size=1)
        tree.update(np.arange(capacity), leaves)
        answers.append(tree.find(targets))
    for answer in answers[1:]:
        np.testing.assert_array_equal(answer, answers[0])


@pytest.mark.parametrize("fanout", FANOUTS)
def test_batched_updates_match_a_brute_force_recomputation(fanout):
    rng = np.random.default_rng(fanout)
    capacity = 777
    tree = SumTree(capacity, fanout, top_size=8)
    leaves = np.zeros(capacity)
    for step in range(50):
        if step % 2:  # a run of neighbours, wrapping around the end
            indices = (rng.integers(0, capacity) + np.arange(64)) % capacity
        else:  # scattered, with repeats: the last value wins
            indices = rng.integers(0, capacity, 64)
        values = rng.integers(0, 5, 64).astype(np.float64)
        tree.update(indices, values)
        for index, value in zip(indices, values):
            leaves[index] = value
        np.testing.assert_array_equal(tree.values(np.arange(capacity)), leaves)
        assert tree.total == leaves.sum()
        assert tree.min_positive == leaves[leaves > 0].min()
        targets = np.arange(int(leaves.sum())) + 0.5
        np.testing.assert_array_equal(tree.find(targets), brute_force_find(leaves, targets))


def test_zero_leaves_are_never_found_even_for_targets_out_of_range():
    tree = SumTree(capacity=100, fanout=4, top_size=1)
    leaves = np.zeros(100)
    leaves[[3, 50, 51, 97]] = [0.1, 2.0, 1e-3, 0.7]
    tree.update(np.arange(100), leaves)
    targets = np.concatenate([np.linspace(0, tree.total, 1001), [-1.0, tree.total * 2, np.inf]])
    found = tree.find(targets)
    assert set(found.tolist()) == {3, 50, 51, 97}
    assert found[-1] == 97  # past the total: the last positive leaf
    assert found[-3] == 3  # below zero: the first positive leaf


def test_find_never_returns_a_zero_leaf_under_float32_rounding():
    rng = np.random.default_rng(0)
    capacity = 50_000
    leaves = rng.random(capacity) ** 8  # many magnitudes, so that float32 sums round
    leaves[rng.random(capacity) < 0.5] = 0.0
    tree = SumTree(capacity, fanout=16, top_size=64)
    tree.update(np.arange(capacity), leaves)
    targets = np.sort(rng.random(100_000)) * tree.total
    found = tree.find(np.concatenate([targets, [tree.total, np.nextafter(tree.total, 0)]]))
    assert (tree.values(found) > 0).all()


def test_min_positive_ignores_zero_leaves_and_is_inf_when_all_are_zero():
    for top_size in (1, 4096):  # a deep tree and a flat one
        tree = SumTree(capacity=40, fanout=2, top_size=top_size)
        assert tree.min_positive == np.inf
        tree.update(np.array([5, 9, 30]), np.array([3.0, 0.5, 2.0]))
        assert tree.min_positive == 0.5
        tree.update(np.array([9]), np.array([0.0]))
        assert tree.min_positive == 2.0
        assert tree.total == 5.0


@pytest.mark.parametrize("fanout", FANOUTS)
def test_min_positive_follows_its_leaf_when_it_rises_or_falls(fanout):
    """Every batch raises or zeroes the smallest leaf (so each level's minimum must be found
    again among the siblings) and lowers others, in a tree of several levels."""
    rng = np.random.default_rng(fanout)
    capacity = 300
    tree = SumTree(capacity, fanout, top_size=2)
    leaves = (rng.random(capacity) + 0.5).astype(np.float32)
    tree.update(np.arange(capacity), leaves)
    for _ in range(100):
        smallest = np.flatnonzero(leaves == leaves[leaves > 0].min())
        indices = np.concatenate([smallest, rng.integers(0, capacity, 8)])
        values = (rng.random(len(indices)) * 2).astype(np.float32)
        values[rng.random(len(indices)) < 0.1] = 0.0
        tree.update(indices, values)
        for index, value in zip(indices, values):
            leaves[index] = value
        assert tree.min_positive == leaves[leaves > 0].min()


def test_update_returns_the_largest_value_and_rejects_negative_or_non_finite_ones():
    tree = SumTree(capacity=10, fanout=2)
    assert tree.update(np.array([1, 2]), np.array([3.0, 0.5])) == 3.0
    assert tree.update(np.array([1, 2]), np.array([3.0, 0.5]), offset=1.0, power=2.0) == 3.0
    assert tree.values(np.array([1, 2])).tolist() == [16.0, 2.25]  # (value + offset) ** power
    for bad in (-1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="finite and non-negative"):
            tree.update(np.array([3, 4]), np.array([1.0, bad]))
        assert tree.values(np.array([3, 4])).tolist() == [0.0, 0.0]  # nothing written
        assert tree.total == 18.25


@pytest.mark.parametrize("fanout", [4, 16])
def test_a_parent_is_its_childrens_sum_rounded_once_to_float32(fanout):
    """Summed in float32, 1 + 2^-24 + 2^-24 + ... would stay 1 at every step."""
    tree = SumTree(capacity=fanout, fanout=fanout, top_size=1)
    leaves = np.array([1.0] + [2.0**-24] * (fanout - 1))
    tree.update(np.arange(fanout), leaves)
    assert tree.total == np.float32(leaves.sum()) > 1.0


def test_update_rejects_an_index_out_of_range_and_writes_nothing():
    tree = SumTree(capacity=10, fanout=4, top_size=1)
    tree.update(np.array([1]), np.array([2.0]))
    for bad in (10, -1):
        with pytest.raises(IndexError, match=f"index {bad} is outside"):
            tree.update(np.array([0, bad]), np.array([5.0, 5.0]))
    assert tree.values(np.arange(10)).tolist() == [0, 2] + [0] * 8
    assert tree.total == 2.0


def test_update_rejects_values_that_do_not_match_the_indices():
    with pytest.raises(ValueError, match="one length"):
        SumTree(capacity=10).update(np.array([0, 1]), np.array([1.0]))


def test_find_needs_a_positive_total():
    tree = SumTree(capacity=10, fanout=4, top_size=1)
    assert tree.find(np.empty(0)).tolist() == []
    with pytest.raises(ValueError, match="positive total"):
        tree.find(np.array([0.5]))


def test_a_target_past_a_parent_rounded_up_takes_the_last_positive_child():
    # float32(1 + 1.5 * 2**-24) rounds up to 1 + 2**-23, so the root holds more than its
    # children do, and a target just below the root lies past the end of their group.
    tree = SumTree(capacity=4, fanout=4, top_size=1)
    tree.update(np.arange(4), np.array([1.0, 1.5 * 2**-24, 0.0, 0.0]))
    past_the_children = 1 + 1.75 * 2**-24
    assert tree.find(np.array([past_the_children, 0.5])).tolist() == [1, 0]


def test_deep_trees_agree_with_flat_ones():
    rng = np.random.default_rng(3)
    leaves = rng.random(5000) ** 4 * (rng.random(5000) < 0.7)
    targets = rng.random(20_000) * leaves.sum()
    answers = []
    for top_size in (1, 64, 8192):  # a single root, a flat top above two levels, all flat
        tree = SumTree(5000, fanout=8, top_size=top_size)
        tree.update(np.arange(5000), leaves)
        answers.append(tree.find(targets))
    # Rounding may move a target that falls within a few ulps of a boundary.
    for answer in answers[1:]:
        assert (answer != answers[0]).mean() < 1e-3
        assert (tree.values(answer) > 0).all()
