"""actorq: reinforcement learning with quantized actors and a full-precision learner.

``actorq.load(run_dir)`` returns a trained run's greedy policy (:func:`actorq.tools.agent.load`);
it is imported on first use, so ``import actorq`` stays cheap.
"""

__all__ = ["Agent", "load"]


def __getattr__(name: str):
    if name in __all__:
        from actorq.tools import agent

        return getattr(agent, name)
    raise AttributeError(f"module 'actorq' has no attribute {name!r}")
