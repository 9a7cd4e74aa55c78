"""The worked example of docs/configuration.md: a new env suite, end to end, in one file."""

from pathlib import Path

import gymnasium
import numpy as np
import pytest
from torchrl.envs import Compose, DoubleToFloat, RewardSum, TransformedEnv
from torchrl.envs.libs.gym import GymWrapper

from actorq.envs import EnvSpec, EnvSuite, make_env, random_observations, register_suite, suites, unregister_suite


class Corridor(gymnasium.Env):
    """Walk right along a corridor of `length` cells; reaching the end pays 1 and ends the episode."""

    def __init__(self, length: int):
        self.length = length
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float64)
        self.action_space = gymnasium.spaces.Discrete(2)  # 0: left, 1: right

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self._observation(), {}

    def step(self, action):
        self.position = min(max(self.position + (1 if action == 1 else -1), 0), self.length)
        done = self.position == self.length
        return self._observation(), float(done), done, False, {}

    def _observation(self):
        return np.array([self.position / self.length])


@pytest.fixture
def toy_suite():
    @register_suite  # from here on, `env.library: toy` (or library="toy") picks this suite
    class ToySuite(EnvSuite):
        name = "toy"

        def names(self):
            return ["corridor-5", "corridor-20"]

        def make(self, env_name, seed):
            length = int(env_name.removeprefix("corridor-"))
            env = TransformedEnv(
                GymWrapper(Corridor(length), categorical_action_encoding=True),
                Compose(DoubleToFloat(), RewardSum()),  # float32 observation and reward, episode_reward
            )
            if seed is not None:
                env.set_seed(seed)
            return env

    yield ToySuite
    unregister_suite("toy")  # tests only: leave the registry as it was


def test_a_new_suite_works_end_to_end(toy_suite):
    env = make_env("corridor-5", seed=0, library="toy")
    assert EnvSpec.from_env(env) == EnvSpec(obs_dim=1, discrete=True, num_actions=2)
    steps = env.rollout(8, break_when_any_done=False)
    assert steps["next", "observation"].shape == (8, 1)
    assert random_observations(env, 6).shape == (6, 1)


def test_without_a_library_the_new_suite_is_found_by_name(toy_suite):
    assert EnvSpec.from_env(make_env("corridor-20")).obs_dim == 1


def test_the_example_leaves_the_registry_as_it_found_it():
    assert "toy" not in suites()


def test_the_docs_show_this_example_verbatim():
    here = Path(__file__).read_text()
    example = here[here.index("class Corridor") : here.index("def test_a_new_suite_works_end_to_end")].rstrip()
    docs = Path(__file__).parents[2] / "docs" / "configuration.md"
    assert example in docs.read_text(), "copy the example of this file into docs/configuration.md"
