"""A run's config from Python, composed and checked as ``actorq train`` does it.

Example:
    >>> cfg = config("+experiment=dqn_cartpole", "quant.bits=8", "run_dir=runs/dqn")
    >>> cfg.algo._target_, cfg.quant.bits, cfg.run_dir
    ('actorq.algos.dqn.DQN', 8, 'runs/dqn')
    >>> config("algo=dqnn")
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: In 'config': Could not find 'algo/dqnn'; available options in 'algo': d4pg, ddpg, dqn, ppo, sac, td3
    >>> config("actors.num_workers=0")
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: actors.num_workers must be positive, got 0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, open_dict

from actorq.run.checks import check_run_config, composed
from actorq.util.values import override_value


def config(*overrides: str) -> DictConfig:
    """The config of one run: ``overrides`` as the command line takes them
    (``"+experiment=NAME"``, ``"group=option"``, ``"key=value"``), composed and checked before
    anything starts. Without a ``run_dir=`` the run goes where the command line would put it,
    ``outputs/EXPERIMENT/DATE_TIME_PRECISION``.

    Raises:
        ConfigError: the command line's one-line message for an override it would refuse.
    """
    return config_and_overrides(*overrides)[0]


def config_and_overrides(*overrides: str) -> tuple[DictConfig, list[str]]:
    """:func:`config`, and the overrides as Hydra saves them in a run's ``.hydra/overrides.yaml``
    (an env id as the env file and ``env.name`` it stands for), for ``actorq resume``."""
    cfg = composed(list(overrides), return_hydra_config=True)
    saved = list(cfg.hydra.overrides.task)
    with open_dict(cfg):
        if not any(item.startswith("run_dir=") for item in overrides):
            cfg.run_dir = cfg.hydra.run.dir
        del cfg["hydra"]  # as Hydra's compose leaves a run's config
    check_run_config(cfg)
    return cfg, saved


def overrides_of(settings: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Keyword settings as command-line overrides: a group's option, a key, or a group's keys
    as a dict.

    Example:
        >>> print(*overrides_of({"algo": "ppo", "seed": 1, "quant": {"bits": 8}, "algo.hidden": [64, 64]}))
        algo=ppo seed=1 quant.bits=8 algo.hidden=[64,64]
    """
    overrides = []
    for key, value in settings.items():
        if isinstance(value, Mapping):
            overrides += overrides_of(value, f"{prefix}{key}.")
        else:
            overrides.append(f"{prefix}{key}={override_value(value)}")
    return overrides
