"""A run's config from Python, composed and checked as ``python -m actorq`` does it.

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

from datetime import datetime

from omegaconf import DictConfig

from actorq.run.checks import check_run_config, composition_error
from actorq.util.errors import ConfigError


def config(*overrides: str) -> DictConfig:
    """The config of one run: ``overrides`` as the command line takes them
    (``"+experiment=NAME"``, ``"group=option"``, ``"key=value"``), composed and checked before
    anything starts. Without a ``run_dir=`` the run goes to ``outputs/DATE/TIME``, as from the
    command line.

    Raises:
        ConfigError: the command line's one-line message for an override it would refuse.
    """
    overrides = list(overrides)
    if not any(item.startswith("run_dir=") for item in overrides):
        overrides.append(f"run_dir=outputs/{datetime.now():%Y-%m-%d/%H-%M-%S}")
    problem = composition_error(overrides)
    if problem is not None:
        raise ConfigError(problem)
    from hydra import compose, initialize_config_module

    with initialize_config_module("actorq.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    check_run_config(cfg)
    return cfg
