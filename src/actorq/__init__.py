"""actorq: reinforcement learning with quantized actors and a full-precision learner.

``actorq.learn(experiment, **settings)`` trains a run and returns its agent
(:func:`actorq.tools.learn.learn`); ``actorq.load(run_dir)`` returns a trained run's agent
(:func:`actorq.tools.agent.load`), which acts (``predict``), plays episodes (``evaluate``) and
writes itself as one TorchScript file (``export``); ``actorq.config(*overrides)`` composes and
checks a run's config as the command line does (:func:`actorq.run.compose.config`), for
``actorq.train.train``. Each is imported on first use, so ``import actorq`` stays cheap.
"""

__all__ = ["Agent", "config", "learn", "load"]

_HOMES = {"Agent": "actorq.tools.agent", "load": "actorq.tools.agent", "config": "actorq.run.compose",
          "learn": "actorq.tools.learn"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'actorq' has no attribute {name!r}")
