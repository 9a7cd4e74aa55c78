"""A K-ary sum tree over non-negative leaf values, with batched update and search compiled
by numba.

Each node holds the sum of its ``fanout`` children, and siblings sit next to each other in
memory, aligned to cache lines: with 16 float32 children a search step reads exactly one
64-byte line, where a binary tree reads ``log2(capacity)`` scattered ones. The tree also
tracks the minimum positive leaf, which importance-sampling weights are normalised by.

Example:
    >>> tree = SumTree(capacity=5, fanout=4)
    >>> tree.update(np.arange(5), np.array([1.0, 0.0, 2.0, 0.0, 1.0]))  # the largest value
    2.0
    >>> float(tree.total), float(tree.min_positive)
    (4.0, 1.0)
    >>> tree.find(np.array([0.5, 1.5, 3.5])).tolist()  # prefix sums fall into leaves 0, 2, 4
    [0, 2, 4]
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

CACHE_LINE_BYTES = 64
_LINE_FLOATS = CACHE_LINE_BYTES // np.dtype(np.float32).itemsize


class InvalidValue(ValueError):
    """A value for a leaf that is negative, NaN or infinite."""

    def __init__(self, value: float, index: int):
        super().__init__(f"sum tree values must be finite and non-negative, got {value} for leaf {index}")
        self.value, self.index = value, index


class SumTree:
    """Sums and minima of ``capacity`` float32 leaves, grouped ``fanout`` children per node.

    Levels are built bottom-up until one has at most ``top_size`` nodes. That top level is
    searched with its prefix sums (a scan onwards from the previous target, or a binary
    search), which for a few hundred nodes is cheaper than descending the last levels one
    by one. Every lower level is padded to a whole number of sibling groups, so any
    capacity works, not only powers of the fanout.
    Parents are recomputed from their children on each update rather than adjusted by
    deltas, so rounding errors never accumulate.

    All levels live in one float32 array, each level starting on a cache line, which the
    loops compiled by numba (:func:`_refresh`, :func:`_search`) walk
    with a table of where each level starts. The first tree built in a process compiles
    them, or loads them from numba's on-disk cache.

    Args:
        capacity: number of leaves.
        fanout: children per node, a power of two from 2 to 256.
        top_size: the largest level searched flat; ``1`` gives a tree with a single root.

    Example:
        >>> tree = SumTree(capacity=3, fanout=2, top_size=1)
        >>> tree.update(np.array([0, 2]), np.array([1.0, 3.0]))
        3.0
        >>> tree.values(np.array([0, 1, 2])).tolist()
        [1.0, 0.0, 3.0]
        >>> tree.depth
        2
    """

    def __init__(self, capacity: int, fanout: int = 16, top_size: int = 256):
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
        # Bottom-up, the leaves first and the flat top last; the last entry is the end.
        lines = [-(-size // _LINE_FLOATS) * _LINE_FLOATS for size in level_sizes]
        self._starts = np.cumsum([0, *lines], dtype=np.int64)
        self._sums = _cache_aligned_zeros(int(self._starts[-1]))
        # Smallest positive leaf below each node, inf if none, for every level but the leaves.
        self._mins = _cache_aligned_zeros(int(self._starts[-1] - self._starts[1]))
        self._mins[:] = np.inf
        self._leaves = self._sums[:capacity]
        self._total = 0.0
        self._min_positive = np.inf
        # Compiles the loops now (or loads them from numba's cache), not on the first sample.
        self.update(np.empty(0, np.int64), np.empty(0))
        self.find(np.empty(0))

    @property
    def depth(self) -> int:
        """Number of levels below the flat top level."""
        return len(self._starts) - 2

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return self._total

    @property
    def min_positive(self) -> float:
        """Smallest positive leaf, ``inf`` when every leaf is zero."""
        return self._min_positive

    def values(self, indices: np.ndarray) -> np.ndarray:
        """Leaf values at ``indices``."""
        return self._leaves[indices]

    def update(self, indices: np.ndarray, values: np.ndarray, offset: float = 0.0, power: float = 1.0) -> float:
        """Sets leaves ``indices`` to ``(values + offset) ** power`` (stored as float32) and
        refreshes their ancestors, each once per run of neighbours that share it (a range of
        ring-buffer slots costs little more than one slot). With repeated indices the last
        value wins. Nothing is written unless every index and value is valid.

        Args:
            indices: leaves to set, in ``[0, capacity)``.
            values: one per index, finite and non-negative.
            offset, power: the transform of each value into its leaf; ``offset >= 0``.

        Returns:
            The largest of ``values`` (``-inf`` for none).
        """
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        values = np.ascontiguousarray(values, dtype=np.float64)
        if values.shape != indices.shape or indices.ndim != 1:
            raise ValueError(
                f"sum tree update needs 1-d indices and values of one length, got shapes "
                f"{indices.shape} and {values.shape}"
            )
        # The compiled loop checks its input itself, since nothing checks its writes.
        total, min_positive, highest, bad_index, bad_value = _kernels().refresh(
            self._sums, self._mins, self._starts, self._shift, self.capacity, indices, values,
            offset, power,
        )
        if bad_index >= 0:
            raise IndexError(f"sum tree index {indices[bad_index]} is outside [0, {self.capacity})")
        if bad_value >= 0:
            raise InvalidValue(values[bad_value], indices[bad_value])
        self._total, self._min_positive = total, min_positive
        return highest

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """Returns, for each target ``t`` in ``[0, total)``, the leaf ``i`` with
        ``sum(leaves[:i]) <= t < sum(leaves[:i + 1])``.

        Targets outside that range (from rounding) are clamped into it, and a leaf whose value
        is zero is never returned. Needs a positive total.
        """
        targets = np.array(prefix_sums, dtype=np.float64)  # a copy: the search overwrites it
        if targets.ndim != 1:
            raise ValueError(f"sum tree find needs 1-d prefix sums, got shape {targets.shape}")
        if len(targets) and not self._total > 0:
            raise ValueError(f"sum tree find needs a positive total, got {self._total}")
        return _kernels().search(self._sums, self._starts, self._shift, targets)


@functools.cache
def _kernels() -> SimpleNamespace:
    """The tree's loops compiled by numba, each on its first call.

    numba is imported only here, so that processes which import the replay package without
    building a tree (actor workers, for one) do not pay for it.
    """
    # The sums of sibling groups may be taken in any order (as SIMD lanes do); rounding
    # then differs from a left-to-right sum in the last bits of a float64, which the float32
    # node cannot hold anyway. No "nnan": the refresh checks its values for NaN. The search
    # keeps its order: it compares running sums with targets.
    return SimpleNamespace(
        refresh=_compile(_refresh, fastmath={"reassoc", "nsz"}), search=_compile(_search)
    )


def _compile(function, **options):
    """``function`` compiled by numba with its machine code cached on disk, next to this
    file or, where that is read-only, in numba's user-wide cache: later processes load it in
    milliseconds instead of compiling it for seconds."""
    import numba

    try:
        return numba.njit(cache=True, **options)(function)
    except RuntimeError:  # no writable cache directory anywhere: compile in every process
        return numba.njit(**options)(function)


def _refresh(sums, mins, starts, shift, capacity, indices, values, offset, power):
    """Writes the leaves ``(values + offset) ** power`` and brings their ancestors' sums
    and minima up to date. Returns ``(total, min_positive, highest value, -1, -1)``; or,
    with nothing written, ``(0, 0, 0, j, -1)`` when ``indices[j]`` is the first index outside
    ``[0, capacity)`` and ``(0, 0, 0, -1, j)`` when ``values[j]`` is the first value that is
    negative or not finite.

    A minimum changes with a leaf only where the leaf goes below it, or was it and rises:
    so a leaf's change climbs as far as it moves a minimum (rarely past its own group) and
    a group's minimum is recomputed only when its smallest child rose. Sums are recomputed
    from the children, level by level, a parent shared by consecutive nodes once.
    """
    count, fanout, inf = len(indices), 1 << shift, np.float32(np.inf)
    highest = -np.inf
    for j in range(count):
        if indices[j] < 0 or indices[j] >= capacity:
            return 0.0, 0.0, 0.0, j, -1
        if not (values[j] >= 0 and values[j] < np.inf):  # false for NaN too
            return 0.0, 0.0, 0.0, -1, j
        highest = max(highest, values[j])
    top, first_min = len(starts) - 2, starts[1]  # the top level's number; mins start at level 1
    for j in range(count):
        node = indices[j]
        leaf = np.float32(values[j] + offset)
        if power != 1.0:
            leaf = leaf ** np.float32(power)
        before = sums[node] if sums[node] > 0 else inf
        after = leaf if leaf > 0 else inf
        sums[node] = leaf
        level = 1
        while level <= top and after != before:
            node >>= shift
            slot = starts[level] - first_min + node
            smallest = mins[slot]
            if after < smallest:
                mins[slot], before = after, smallest
            elif before == smallest:  # the smallest child rose: its group decides
                first, after = starts[level - 1] + (node << shift), inf
                for child in range(first, first + fanout):
                    if level == 1:  # a leaf counts only if positive
                        after = min(after, sums[child] if sums[child] > 0 else inf)
                    else:
                        after = min(after, mins[child - first_min])
                mins[slot], before = after, smallest
            else:
                break
            level += 1
    nodes = indices.copy()
    for level in range(1, top + 1):
        below, here = starts[level - 1], starts[level]
        kept = 0
        for j in range(count):
            parent = nodes[j] >> shift
            if kept == 0 or parent != nodes[kept - 1]:
                nodes[kept] = parent
                kept += 1
        count = kept
        for parent in nodes[:count]:
            first, total = below + (parent << shift), 0.0
            if fanout == 16:  # the default, a constant here so that it compiles to SIMD code
                for child in range(first, first + 16):
                    total += sums[child]
            else:
                for child in range(first, first + fanout):
                    total += sums[child]
            sums[here + parent] = total
    total, smallest = 0.0, inf
    for node in range(starts[-2], starts[-1]):
        total += sums[node]
        if top == 0:  # the top level is the leaves
            smallest = min(smallest, sums[node] if sums[node] > 0 else inf)
        else:
            smallest = min(smallest, mins[node - first_min])
    return total, float(smallest), highest, -1, -1


def _search(sums, starts, shift, targets):
    """The leaf holding each target; overwrites ``targets``.

    First the node of the flat top level holding each target, by a scan (or, for a target
    below the one before it, a binary search) of that level's float64 prefix sums, after
    clamping the target into ``[0, total)`` so that the node found is positive. Then down the
    levels below: a target's child is the number of its siblings whose running sum (in
    float64) ends at or before the target. The loops run child by child across all targets,
    so that the running sums of different targets proceed side by side and their cache
    misses overlap; target by target, each would wait for the last.

    A stored parent can exceed the exact sum of its children by float32 rounding, so a
    target can lie past the end of its group; it then takes the group's last positive
    child. Either way the chosen child is positive, so a zero leaf is never returned.
    """
    top, end = starts[-2], starts[-1]
    prefix = np.zeros(end - top + 1)
    for node in range(top, end):
        prefix[node - top + 1] = prefix[node - top] + sums[node]
    last = np.nextafter(prefix[-1], 0.0)
    count, fanout = len(targets), 1 << shift
    nodes = np.empty(count, np.int64)
    node, size = 0, end - top
    for j in range(count):
        target = min(targets[j] if targets[j] > 0 else 0.0, last)  # NaN becomes 0 too
        # The last node whose prefix sum is at or before the target. Sampled targets come
        # in increasing order, so a scan onwards from the last one's node finds it in a step
        # or two, with branches the CPU predicts; any other target is searched for.
        if target < prefix[node]:
            node = min(np.searchsorted(prefix, target, side="right") - 1, size - 1)
        while node < size - 1 and prefix[node + 1] <= target:  # bounded for an all-zero level
            node += 1
        nodes[j] = node
        targets[j] = target - prefix[node]
    running, before = np.empty(count), np.empty(count)
    for level in range(len(starts) - 3, -1, -1):
        firsts = starts[level] + (nodes << shift)
        running[:] = 0.0
        before[:] = 0.0
        nodes[:] = firsts
        for child in range(fanout):
            for j in range(count):
                value = sums[firsts[j] + child]
                running[j] += value
                # Arithmetic rather than a branch: whether a target lies beyond a child is a
                # coin toss, and each mispredicted branch would cancel the loads in flight.
                beyond = running[j] <= targets[j]
                nodes[j] += beyond
                before[j] += value * beyond
        for j in range(count):
            if nodes[j] == firsts[j] + fanout:  # past the end of the group
                nodes[j] -= 1
                while nodes[j] > firsts[j] and not sums[nodes[j]] > 0:
                    nodes[j] -= 1
                before[j] = running[j] - sums[nodes[j]]
            targets[j] = max(targets[j] - before[j], 0.0)
            nodes[j] -= starts[level]
    return nodes


def _cache_aligned_zeros(size: int) -> np.ndarray:
    """A float32 array whose first element starts a cache line, so that every group of 16
    siblings fills exactly one line."""
    raw = np.zeros(size + _LINE_FLOATS, np.float32)
    offset = (-raw.ctypes.data % CACHE_LINE_BYTES) // raw.itemsize
    return raw[offset : offset + size]
