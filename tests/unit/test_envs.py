import pytest
import torch

from actorq.envs import EnvSpec, find_suite, make_env
from actorq.util.errors import ConfigError

ENVS = [
    ("CartPole-v1", "gymnasium", 4, True),
    ("Pendulum-v1", "gymnasium", 3, False),
    ("cheetah-run", "dm_control", 17, False),
    ("cartpole-balance", "dm_control", 5, False),
]


@pytest.mark.parametrize(("name", "library", "obs_dim", "discrete"), ENVS)
def test_flat_float32_observations(name, library, obs_dim, discrete):
    env = make_env(name, seed=0, library=library)
    spec = EnvSpec.from_env(env)
    assert (spec.obs_dim, spec.discrete) == (obs_dim, discrete)
    step = env.rand_step(env.reset())
    assert step["observation"].dtype == torch.float32 and step["observation"].shape == (obs_dim,)
    assert step["next", "reward"].dtype == torch.float32
    assert step["next", "episode_reward"].dtype == torch.float32
    if discrete:
        assert step["action"].shape == () and not step["action"].is_floating_point()


@pytest.mark.parametrize(("name", "library"), [("CartPole-v1", "gymnasium"), ("cheetah-run", "dm_control")])
def test_the_seed_makes_the_first_observation_repeatable(name, library):
    first = [make_env(name, seed=3, library=library).reset()["observation"] for _ in range(2)]
    assert torch.equal(first[0], first[1])


def test_continuous_spec_has_bounds():
    spec = EnvSpec.from_env(make_env("Pendulum-v1"))
    assert spec.action_low == (-2.0,) and spec.action_high == (2.0,)


def test_without_a_library_the_one_suite_that_knows_the_name_makes_it():
    assert find_suite("CartPole-v1").name == "gymnasium"
    assert find_suite("walker-walk").name == "dm_control"
    assert EnvSpec.from_env(make_env("cartpole-balance")).obs_dim == 5


@pytest.mark.parametrize(("name", "hint"), [("CartPol-v1", "CartPole-v1"), ("cheeta-run", "cheetah-run")])
def test_unknown_env_is_a_clear_error_with_a_suggestion(name, hint):
    with pytest.raises(ConfigError, match=f"unknown environment.*Did you mean: {hint}"):
        make_env(name)


@pytest.mark.parametrize(
    ("name", "library", "hint"),
    [("CartPol-v1", "gymnasium", "CartPole-v1"), ("cheeta-run", "dm_control", "cheetah-run")],
)
def test_unknown_env_in_a_library_suggests_from_that_library(name, library, hint):
    with pytest.raises(ConfigError, match=f"unknown environment '{name}' in library '{library}'.*Did you mean: {hint}"):
        make_env(name, library=library)


def test_a_mujoco_env_without_the_extra_says_how_to_install_it(monkeypatch):
    import actorq.envs.gymnasium

    monkeypatch.setattr(actorq.envs.gymnasium, "mujoco_available", lambda: False)  # MuJoCo ships with dm-control
    with pytest.raises(ConfigError, match=r"needs MuJoCo.*actorq\[mujoco\]"):
        make_env("HalfCheetah-v5", library="gymnasium")
