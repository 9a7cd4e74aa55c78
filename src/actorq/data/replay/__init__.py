"""Replay buffers: uniform, prioritized (K-ary sum tree) and shared-memory prioritized.

Example:
    >>> from actorq.data.replay import make_replay
    >>> type(make_replay(capacity=1000)).__name__
    'UniformReplay'
"""

from actorq.data.replay.factory import make_replay, transition_template

__all__ = ["make_replay", "transition_template"]
