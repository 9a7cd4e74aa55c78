"""The sum tree in worker processes (spawn and fork), as actors and learners use it."""

import multiprocessing

import numpy as np
import pytest

from actorq.data.replay.sumtree import SumTree


def build_and_search(capacity: int) -> list[int]:
    """Worker process: builds a tree, so that the compiled loops load in a fresh process."""
    tree = SumTree(capacity, fanout=4)
    tree.update(np.arange(capacity), np.ones(capacity))
    return tree.find(np.array([0.5, capacity - 0.5])).tolist()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_works_in_worker_processes(method):
    SumTree(8)  # compiled in this process first, as in a learner that starts workers
    with multiprocessing.get_context(method).Pool(1) as pool:
        assert pool.apply(build_and_search, (1000,)) == [0, 999]
