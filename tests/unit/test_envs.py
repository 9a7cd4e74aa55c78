import pytest
import torch

from actorq.envs import EnvSpec, backend_of, make_env
from actorq.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "obs_dim", "discrete"),
    [("CartPole-v1", 4, True), ("Pendulum-v1", 3, False), ("cheetah-run", 17, False),
     ("cartpole-balance", 5, False)],
)
def test_flat_float32_observations(name, obs_dim, discrete):
    env = make_env(name, seed=0)
    spec = EnvSpec.from_env(env)
    assert (spec.obs_dim, spec.discrete) == (obs_dim, discrete)
    step = env.rand_step(env.reset())
    assert step["observation"].dtype == torch.float32 and step["observation"].shape == (obs_dim,)
    assert step["next", "reward"].dtype == torch.float32


def test_continuous_spec_has_bounds():
    spec = EnvSpec.from_env(make_env("Pendulum-v1"))
    assert spec.action_low == (-2.0,) and spec.action_high == (2.0,)


def test_backends():
    assert backend_of("CartPole-v1") == "gym"
    assert backend_of("walker-walk") == "dm_control"


@pytest.mark.parametrize(("name", "hint"), [("CartPol-v1", "CartPole-v1"), ("cheeta-run", "cheetah-run")])
def test_unknown_env_is_a_clear_error_with_a_suggestion(name, hint):
    with pytest.raises(ConfigError, match=f"unknown environment.*Did you mean: {hint}"):
        make_env(name)
