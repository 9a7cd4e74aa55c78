"""The env suite registry: listing, choosing a suite, and the errors a config can run into."""

import pytest
from torchrl.envs import CatTensors, RewardSum, TransformedEnv
from torchrl.envs.libs.dm_control import DMControlEnv
from torchrl.envs.libs.gym import GymEnv

from actorq.envs import EnvSuite, find_suite, make_env, register_suite, suites, unregister_suite
from actorq.errors import ConfigError


@pytest.fixture
def register():
    """``register(cls)`` registers a suite for one test and removes it afterwards."""
    added = []

    def _register(cls):
        register_suite(cls)
        added.append(cls.name)
        return cls

    yield _register
    for name in added:
        unregister_suite(name)


def suite_class(suite_name, env_names, make=None):
    def _make(self, env_name, seed):
        raise AssertionError("not built in this test")

    return type(
        f"Suite_{suite_name}",
        (EnvSuite,),
        {"name": suite_name, "names": lambda self: list(env_names), "make": make or _make},
    )


def test_the_built_in_suites_are_listed():
    assert {"gymnasium", "dm_control"} <= set(suites())
    assert "CartPole-v1" in suites()["gymnasium"].names()
    assert "cheetah-run" in suites()["dm_control"].names()


def test_suites_is_a_copy():
    suites().pop("gymnasium")
    assert "gymnasium" in suites()


def test_an_unknown_library_is_a_one_line_error_listing_the_suites():
    with pytest.raises(ConfigError) as error:
        make_env("CartPole-v1", library="brax")
    message = str(error.value)
    assert "\n" not in message
    assert "unknown env library 'brax'" in message and "dm_control, gymnasium" in message


@pytest.mark.parametrize(
    ("name", "library", "right"), [("cheetah-run", "gymnasium", "dm_control"), ("CartPole-v1", "dm_control", "gymnasium")]
)
def test_a_name_from_another_library_says_which(name, library, right):
    with pytest.raises(ConfigError, match=f"'{name}' is not in library '{library}' but in '{right}': set env.library={right}"):
        make_env(name, library=library)


def test_a_name_no_suite_knows_lists_the_suites():
    # Suites registered by modules the session imported (a benchmark's) may follow the built-in ones.
    listed = r"\(dm_control, gymnasium(, \w+)*\)"
    with pytest.raises(ConfigError, match=rf"unknown environment 'nothing-like-it-v9': no env library {listed} has it"):
        make_env("nothing-like-it-v9")


def test_a_name_several_suites_know_needs_a_library(register):
    register(suite_class("one", ["twin-v0"]))
    register(suite_class("two", ["twin-v0"]))
    with pytest.raises(ConfigError, match=r"'twin-v0' is in several env libraries \(one, two\): set env.library"):
        find_suite("twin-v0")
    assert find_suite("twin-v0", library="two").name == "two"


def test_registering_checks_the_class(register):
    register(suite_class("mine", ["a-v0"]))
    with pytest.raises(ValueError, match="'mine' is already registered"):
        register_suite(suite_class("mine", ["b-v0"]))
    with pytest.raises(ValueError, match="non-empty `name`"):
        register_suite(suite_class("", ["c-v0"]))
    with pytest.raises(TypeError, match="EnvSuite subclass"):
        register_suite(object)
    with pytest.raises(KeyError, match="no env suite named 'never'"):
        unregister_suite("never")


def test_make_env_checks_what_a_suite_makes(register):
    def make_without_episode_reward(self, env_name, seed):
        return GymEnv("Pendulum-v1")

    def make_float64(self, env_name, seed):  # dm_control without DoubleToFloat
        return TransformedEnv(
            DMControlEnv("cartpole", "balance"), CatTensors(["position", "velocity"], "observation")
        ).append_transform(RewardSum())

    register(suite_class("bare", ["pendulum-bare"], make_without_episode_reward))
    register(suite_class("raw", ["pendulum-raw"], make_float64))
    with pytest.raises(TypeError, match="'bare' made 'pendulum-bare' with no \"episode_reward\""):
        make_env("pendulum-bare", library="bare")
    with pytest.raises(TypeError, match="torch.float64.*not a flat float32 vector.*the reward is torch.float64"):
        make_env("pendulum-raw", library="raw")
