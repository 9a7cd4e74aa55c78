"""The env suite registry: listing, choosing a suite, importing suites of one's own
(``env.module``), and the errors a config can run into."""

import sys

import pytest
from torchrl.envs import CatTensors, RewardSum, TransformedEnv
from torchrl.envs.libs.dm_control import DMControlEnv
from torchrl.envs.libs.gym import GymEnv

from actorq.envs import (EnvSuite, find_suite, import_suites, make_env, register_suite, suite_modules, suites,
                         unregister_suite)
from actorq.util.errors import ConfigError


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
    # every registered suite is listed (other tests' suites too, when they ran first)
    assert "unknown env library 'brax'" in message and "dm_control" in message and "gymnasium" in message


@pytest.mark.parametrize(
    ("name", "library", "right"), [("cheetah-run", "gymnasium", "dm_control"), ("CartPole-v1", "dm_control", "gymnasium")]
)
def test_a_name_from_another_library_says_which(name, library, right):
    with pytest.raises(ConfigError, match=f"'{name}' is not in library '{library}' but in '{right}': set env.library={right}"):
        make_env(name, library=library)


def test_a_name_no_suite_knows_lists_the_suites():
    # Suites registered by modules the session imported (a benchmark's, a test's) are listed too.
    with pytest.raises(ConfigError, match=r"unknown environment 'nothing-like-it-v9': no env library \(.+\) has it") \
            as error:
        make_env("nothing-like-it-v9")
    listed = str(error.value).split("(")[1].split(")")[0].split(", ")
    assert {"dm_control", "gymnasium"} <= set(listed) and listed == sorted(listed)


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
    with pytest.raises(TypeError, match="Envless needs its environment: implement make_raw"):
        register_suite(type("Envless", (EnvSuite,), {"name": "envless", "names": lambda self: []}))
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
    with pytest.raises(TypeError, match="torch.float64.*neither a flat float32 vector nor uint8 frames.*the reward is torch.float64"):
        make_env("pendulum-raw", library="raw")


@pytest.mark.parametrize(("value", "names"), [(None, ()), ("a.b", ("a.b",)), (["a", "b.c"], ("a", "b.c")), ([], ())])
def test_env_module_is_one_name_or_a_list(value, names):
    assert suite_modules(value) == names


@pytest.mark.parametrize("value", [3, "", ["a", 1], [""], {"a": 1}, True])
def test_a_bad_env_module_value_is_a_one_line_error(value):
    with pytest.raises(ConfigError, match=r"^env.module must be a module name or a list of module names, got"):
        suite_modules(value)


def test_a_module_that_cannot_be_imported_is_named_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_suite.py").write_text("raise RuntimeError('no simulator here\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as missing:
        import_suites(["json", "no_such_suite_module"])
    assert str(missing.value) == ("env.module: cannot import 'no_such_suite_module': "
                                  "ModuleNotFoundError: No module named 'no_such_suite_module'")
    with pytest.raises(ConfigError) as broken:
        import_suites("broken_suite")
    assert str(broken.value) == "env.module: cannot import 'broken_suite': RuntimeError: no simulator here"


def test_importing_a_module_registers_its_suite_once(tmp_path, monkeypatch):
    (tmp_path / "once_suite.py").write_text(
        "from actorq.envs import EnvSuite, register_suite\n"
        "@register_suite\n"
        "class Once(EnvSuite):\n"
        "    name = 'once'\n"
        "    def names(self): return ['once-v0']\n"
        "    def make(self, env_name, seed): raise AssertionError\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "once_suite", raising=False)
    try:
        assert import_suites(["once_suite", "once_suite"]) == ("once_suite", "once_suite")
        import_suites("once_suite")  # imported already: registers nothing again
        assert find_suite("once-v0").name == "once"
    finally:
        sys.modules.pop("once_suite", None)
        unregister_suite("once")
