"""Every config group option composes; every experiment composes and instantiates."""

from importlib import resources

import pytest
from hydra.utils import instantiate

from actorq.envs import backend_of

CONF = resources.files("actorq.conf")
GROUPS = ["env", "algo", "actors", "replay", "quant", "callbacks", "logger", "trainer"]


def options(group):
    return sorted(p.name[: -len(".yaml")] for p in CONF.joinpath(group).iterdir() if p.name.endswith(".yaml"))


def experiments():
    return options("experiment")


def test_the_default_experiment_exists():
    assert "dqn_cartpole" in experiments()


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(make_cfg, group):
    for option in options(group):
        cfg = make_cfg(f"{group}={option}")
        assert cfg[group] is not None


@pytest.mark.parametrize("name", experiments())
def test_every_experiment_composes_with_a_known_env_and_algo(make_cfg, name):
    cfg = make_cfg(f"+experiment={name}")
    assert backend_of(cfg.env.name) in {"gym", "dm_control"}
    assert cfg.algo._target_.startswith("actorq.algos.")
    make_learner = instantiate(cfg.algo)
    assert make_learner.func.action_space in {"discrete", "continuous"}


def test_env_options_name_real_environments(make_cfg):
    for option in options("env"):
        name = make_cfg(f"env={option}").env.name
        if name.endswith("-v5"):
            continue  # needs the optional mujoco extra
        assert backend_of(name)
