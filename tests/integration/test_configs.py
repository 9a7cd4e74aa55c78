"""Every config group option composes; every experiment composes and instantiates."""

from importlib import resources

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from actorq.envs import EnvSpec, make_env, suites
from actorq.envs.gymnasium import mujoco_available, needs_mujoco

CONF = resources.files("actorq.conf")
GROUPS = ["env", "algo", "actors", "replay", "quant", "callbacks", "logger", "trainer"]


def options(group):
    return sorted(p.name[: -len(".yaml")] for p in CONF.joinpath(group).iterdir() if p.name.endswith(".yaml"))


def experiments():
    return options("experiment")


def test_the_default_run_is_dqn_on_cartpole_as_its_experiment_says(make_cfg):
    default, experiment = make_cfg(), make_cfg("+experiment=dqn_cartpole")
    assert default.algo._target_ == "actorq.algos.dqn.DQN" and default.algo.double is True
    assert (default.env.name, default.env.library) == ("CartPole-v1", "gymnasium")
    assert experiment.algo._target_ == default.algo._target_ and experiment.env == default.env
    assert experiment.actors.total_frames == 50000  # what the experiment file sets


def own_keys(group: str, option: str) -> dict:
    """What an option's file itself sets (its defaults list aside), read without Hydra."""
    own = OmegaConf.to_container(OmegaConf.load(CONF.joinpath(group, f"{option}.yaml")), resolve=False)
    own.pop("defaults", None)
    return own


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes_to_what_its_file_sets(make_cfg, group):
    for option in options(group):
        composed = OmegaConf.to_container(make_cfg(f"{group}={option}")[group], resolve=False)
        own = own_keys(group, option)
        assert own, f"{group}/{option}.yaml sets nothing"
        for key, value in own.items():
            assert composed[key] == value, f"{group}={option}: {key} is {composed[key]!r}, its file says {value!r}"


@pytest.mark.parametrize("name", experiments())
def test_every_experiment_composes_with_a_known_env_and_algo(make_cfg, name):
    cfg = make_cfg(f"+experiment={name}")
    assert cfg.env.library in suites() and suites()[cfg.env.library].knows(cfg.env.name)
    assert cfg.algo._target_.startswith("actorq.algos.")
    make_learner = instantiate(cfg.algo)
    assert make_learner.func.action_space in {"discrete", "continuous", "any"}


@pytest.mark.parametrize("option", options("env"))
def test_env_options_name_an_env_of_their_library(make_cfg, option):
    env = make_cfg(f"env={option}").env
    assert env.library in suites(), f"env.library={env.library!r} is not one of {sorted(suites())}"
    assert suites()[env.library].knows(env.name)


@pytest.mark.parametrize("option", options("env"))
def test_env_options_build(make_cfg, option):
    env = make_cfg(f"env={option}").env
    if env.library == "gymnasium" and needs_mujoco(env.name) and not mujoco_available():
        pytest.skip(f"{env.name} needs gymnasium[mujoco]: pip install 'actorq[mujoco]'")
    spec = EnvSpec.from_env(make_env(env.name, seed=0, library=env.library))
    assert spec.obs_dim > 0
