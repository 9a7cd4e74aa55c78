"""A K-ary sum tree over non-negative leaf values, with batched, vectorised update and search.

Each node holds the sum of its ``fanout`` children, and siblings sit next to each other in
memory, aligned to cache lines: with 16 float32 children a search step reads exactly one
64-byte line, where a binary tree reads ``log2(capacity)`` scattered ones. The tree also
tracks the minimum positive leaf, which importance-sampling weights are normalised by.

Example:
    >>> tree = SumTree(capacity=5, fanout=4)
    >>> tree.update(np.arange(5), np.array([1.0, 0.0, 2.0, 0.0, 1.0]))
    >>> float(tree.total), float(tree.min_positive)
    (4.0, 1.0)
    >>> tree.find(np.array([0.5, 1.5, 3.5])).tolist()  # prefix sums fall into leaves 0, 2, 4
    [0, 2, 4]
"""

from __future__ import annotations

import numpy as np
import torch

CACHE_LINE_BYTES = 64


class SumTree:
    """Sums and minima of ``capacity`` float32 leaves, grouped ``fanout`` children per node.

    Levels are built bottom-up until one has at most ``top_size`` nodes. That top level is
    searched with a single cumulative sum and binary search, which for a few thousand nodes is
    cheaper than descending the last levels one by one. Every lower level is padded to a whole
    number of sibling groups, so any capacity works, not only powers of the fanout. Parents are
    recomputed from their children on each update rather than adjusted by deltas, so rounding
    errors never accumulate.

    Args:
        capacity: number of leaves.
        fanout: children per node, a power of two from 2 to 256.
        top_size: the largest level searched flat; ``1`` gives a tree with a single root.

    Example:
        >>> tree = SumTree(capacity=3, fanout=2, top_size=1)
        >>> tree.update(np.array([0, 2]), np.array([1.0, 3.0]))
        >>> tree.values(np.array([0, 1, 2])).tolist()
        [1.0, 0.0, 3.0]
        >>> tree.depth
        2
    """

    def __init__(self, capacity: int, fanout: int = 16, top_size: int = 4096):
        if capacity <= 0:
            raise ValueError(f"sum tree capacity must be positive, got {capacity}")
        if not 2 <= fanout <= 256 or fanout & (fanout - 1):
            raise ValueError(f"sum tree fanout must be a power of two in [2, 256], got {fanout}")
        if top_size <= 0:
            raise ValueError(f"sum tree top_size must be positive, got {top_size}")
        self.capacity = capacity
        self.fanout = fanout
        self._shift = fanout.bit_length() - 1  # node // fanout == node >> shift
        level_sizes = [capacity]
        while level_sizes[-1] > top_size:
            groups = -(-level_sizes[-1] // fanout)
            level_sizes[-1] = groups * fanout
            level_sizes.append(groups)
        # Bottom-up, the leaves first and the flat top last.
        self._sums = [_cache_aligned_zeros(size) for size in level_sizes]
        # Smallest positive leaf below each node, inf if none; level 0 would copy the leaves.
        self._mins = [None] + [np.full(size, np.inf, np.float32) for size in level_sizes[1:]]
        self._total: float | None = 0.0  # cached until the next update
        self._min_positive: float | None = np.inf

    @property
    def depth(self) -> int:
        """Number of levels below the flat top level."""
        return len(self._sums) - 1

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        if self._total is None:
            self._total = float(self._sums[-1].sum(dtype=np.float64))
        return self._total

    @property
    def min_positive(self) -> float:
        """Smallest positive leaf, ``inf`` when every leaf is zero."""
        if self._min_positive is None:
            if self.depth == 0:
                leaves = self._sums[0]
                self._min_positive = float(leaves[leaves > 0].min(initial=np.inf))
            else:
                self._min_positive = float(self._mins[-1].min())
        return self._min_positive

    def values(self, indices: np.ndarray) -> np.ndarray:
        """Leaf values at ``indices``."""
        return self._sums[0][indices]

    def update(self, indices: np.ndarray, values: np.ndarray, *, clustered: bool = False) -> None:
        """Sets leaves ``indices`` to ``values`` (non-negative, stored as float32) and
        refreshes their ancestors. With repeated indices the last value wins.

        Args:
            indices: leaves to set.
            values: their new values.
            clustered: the indices come in runs of neighbours (such as a range of ring-buffer
                slots), so each shared ancestor is refreshed once rather than once per leaf.
        """
        nodes = np.asarray(indices, dtype=np.int64)
        self._sums[0][nodes] = values
        self._total = self._min_positive = None
        for level in range(1, len(self._sums)):
            nodes = nodes >> self._shift
            if clustered:
                nodes = _drop_repeats(nodes)
            children = self._children(self._sums[level - 1], nodes)
            self._sums[level][nodes] = children.sum(axis=0)
            if level == 1:
                child_mins = np.where(children > 0, children, np.inf)
            else:
                child_mins = self._children(self._mins[level - 1], nodes)
            self._mins[level][nodes] = child_mins.min(axis=0)

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Returns, for each target ``t`` in ``[0, total)``, the leaf ``i`` with
        ``sum(leaves[:i]) <= t < sum(leaves[:i + 1])``.

        Targets outside that range (from rounding) are clamped into it, and a leaf whose value
        is zero is never returned. Needs a positive total.
        """
        targets = np.array(prefix_sums, dtype=np.float64)
        np.maximum(targets, 0.0, out=targets)
        nodes = _choose(_cumsum_after_zero(self._sums[-1]), targets)
        columns = np.arange(len(targets))
        for level in range(len(self._sums) - 2, -1, -1):
            children = self._children(self._sums[level], nodes)
            chosen = _choose(_cumsum_after_zero(children), targets, columns)
            nodes = (nodes << self._shift) + chosen
        return nodes

    def _children(self, level: np.ndarray, parents: np.ndarray) -> np.ndarray:
        """``(fanout, len(parents))``: column j holds the children of ``parents[j]``.

        Gathering whole sibling groups as rows (``take``) is several times faster than
        gathering element by element, and the transposed layout lets the reductions over
        siblings run along contiguous memory.
        """
        return level.reshape(-1, self.fanout).take(parents, axis=0).T.copy()


def _drop_repeats(values: np.ndarray) -> np.ndarray:
    """``values`` without elements equal to their predecessor."""
    keep = np.empty(len(values), dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _cumsum_after_zero(values: np.ndarray) -> np.ndarray:
    """Float64 cumulative sums along the first axis, after a row of zeros (an exclusive and
    an inclusive prefix sum in one array). torch's cumsum is several times faster than
    numpy's, and ``torch.from_numpy`` shares memory."""
    cumulative = np.empty((len(values) + 1, *values.shape[1:]))
    cumulative[0] = 0.0
    torch.cumsum(
        torch.from_numpy(values), dim=0, dtype=torch.float64, out=torch.from_numpy(cumulative[1:])
    )
    return cumulative


def _choose(
    cumulative: np.ndarray, targets: np.ndarray, columns: np.ndarray | None = None
) -> np.ndarray:
    """Picks for each target the child ``c`` with ``cumulative[c] <= target <
    cumulative[c + 1]`` and subtracts ``cumulative[c]`` from the target, in place.

    Clamping each target below its group's sum first makes sure the chosen child exists and
    is positive, even where float32 rounding made a parent's stored sum differ slightly from
    the cumulative sum of its children.
    """
    np.minimum(targets, np.nextafter(cumulative[-1], 0.0), out=targets)
    if columns is None:  # the flat top level: a single group
        chosen = np.searchsorted(cumulative, targets, side="right") - 1
        targets -= cumulative[chosen]
    else:  # one group per column
        chosen = (cumulative[1:] <= targets).sum(axis=0)
        targets -= cumulative[chosen, columns]
    return chosen


def _cache_aligned_zeros(size: int) -> np.ndarray:
    """A float32 array whose first element starts a cache line, so that every group of 16
    siblings fills exactly one line."""
    itemsize = np.dtype(np.float32).itemsize
    raw = np.zeros(size + CACHE_LINE_BYTES // itemsize, np.float32)
    offset = (-raw.ctypes.data % CACHE_LINE_BYTES) // itemsize
    return raw[offset : offset + size]
