"""An environment named by its id wherever an env is named (``env=Acrobot-v1`` on the command
line, in ``actorq.config`` and ``actorq.learn``, and an env factory from Python); the one-line
refusals of a name no env library knows, of flags that are not config keys, and of a key the
config does not have. The runs themselves are in ``tests/integration/test_first_week.py``."""

from __future__ import annotations

import importlib.util
import sys
from functools import partial

import gymnasium
import pytest

import actorq
from actorq.__main__ import cli
from actorq.envs import EnvSpec, make_env, register_suite, unregister_suite
from actorq.envs.gymnasium import factory_name
from actorq.run.checks import composition_error
from actorq.run.env_ids import env_overrides
from actorq.run.launch import flag_overrides
from actorq.tools.learn import learn_settings
from actorq.util.errors import ConfigError

NEEDS_ALE = pytest.mark.skipif(importlib.util.find_spec("ale_py") is None, reason="needs ale-py (the atari extra)")


def make_acrobot() -> gymnasium.Env:
    """An env factory, as a user's module defines one."""
    return gymnasium.make("Acrobot-v1")


def make_nothing():
    return None


@pytest.mark.parametrize(("env", "overrides"), [
    ("Acrobot-v1", ["env=cartpole", "env.name=Acrobot-v1"]),
    ("CartPole-v1", ["env=cartpole"]),  # a shipped env file's own env is that file
    ("cartpole", ["env=cartpole"]),
    ("walker-run", ["env=cartpole_balance", "env.name=walker-run"]),
    pytest.param("BreakoutNoFrameskip-v4", ["env=breakout", "env.name=BreakoutNoFrameskip-v4"], marks=NEEDS_ALE),
    pytest.param("ALE/Pong-v5", ["env=pong", "env.name=ALE/Pong-v5"], marks=NEEDS_ALE),
    (f"{__name__}:make_acrobot", ["env=cartpole", f"env.name='{__name__}:make_acrobot'"]),
])
def test_an_id_is_an_env_file_of_its_library_and_env_name(env, overrides):
    assert env_overrides(["algo=ppo", f"env={env}", "seed=1"]) == ["algo=ppo", *overrides, "seed=1"]


@pytest.mark.parametrize(("env", "library"), [
    ("Acrobot-v1", "gymnasium"), ("walker-run", "dm_control"), pytest.param("ALE/Pong-v5", "atari", marks=NEEDS_ALE)])
def test_a_run_config_names_the_id_and_its_library(env, library, tmp_path):
    cfg = actorq.config("algo=ppo", f"env={env}", f"run_dir={tmp_path}")
    assert (cfg.env.name, cfg.env.library) == (env, library)


def test_an_id_names_the_run_dir_as_one_folder():
    run_dir = actorq.config("algo=ppo", "env=phys2d/CartPole-v1").run_dir
    assert "/ppo_phys2d_CartPole-v1/" in run_dir


def test_an_unknown_id_is_one_line_naming_the_closest_ids_and_the_env_name_form():
    with pytest.raises(ConfigError) as error:
        env_overrides(["algo=ppo", "env=Acrobot-v2"])
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("env=Acrobot-v2: no env file or environment has this name; did you mean Acrobot-v1")
    assert "env=ID (the same as env.name=ID;" in message and "env=FILE (breakout, cartpole," in message


@pytest.mark.parametrize("name", ["ALE/Pong-v5", "PongNoFrameskip-v4"])
def test_an_atari_id_without_ale_py_says_to_install_it(name, monkeypatch):
    """Without ale-py gymnasium knows no Atari id: the line says what to install, not that no
    environment has the name (what a base install answered)."""
    from actorq.run import env_ids

    monkeypatch.setitem(sys.modules, "ale_py", None)  # its import fails, as where it is not installed
    message = env_ids._unknown(name, ["breakout", "pong"])
    assert message == f'env={name}: {name} is an Atari game, and Atari needs ale-py: pip install -e ".[atari]"'
    assert env_ids._unknown("Acrobot-v2", ["cartpole"]).startswith("env=Acrobot-v2: no env file")
    monkeypatch.delitem(sys.modules, "ale_py")
    if importlib.util.find_spec("ale_py") is not None:  # installed: the name's own line
        assert "needs ale-py" not in env_ids._unknown(name, ["pong"])


def test_the_command_line_refuses_an_unknown_id_in_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        cli(["train", "algo=ppo", "env=Acrobot-v2"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("actorq: error: env=Acrobot-v2: no env file or environment")


def test_an_id_of_another_library_than_env_library_says_which():
    with pytest.raises(ConfigError, match="env=walker-run: environment 'walker-run' is not in library 'gymnasium' "
                                          "but in 'dm_control': set env.library=dm_control"):
        env_overrides(["env=walker-run", "env.library=gymnasium"])


@pytest.mark.parametrize("name", ["BreakoutNoFrameskip-v4", "ALE/Breakout-v5"])
@NEEDS_ALE
def test_an_atari_id_as_env_name_says_how_to_name_it(name):
    with pytest.raises(ConfigError, match=f"not in library 'gymnasium' but in 'atari': set env.library=atari, "
                                          f"or say env={name} alone"):
        make_env(name, library="gymnasium")


def test_an_id_of_a_suite_of_ones_own_adds_its_library():
    cls = type("TwinSuite", (actorq.envs.EnvSuite,), {"name": "twins", "names": lambda self: ["twin-v0"],
                                                     "make": lambda self, name, seed: None})
    register_suite(cls)
    try:
        assert env_overrides(["env=twin-v0"]) == ["env=cartpole", "env.name=twin-v0", "env.library=twins"]
    finally:
        unregister_suite("twins")


def test_a_sweep_over_ids_of_one_library_sweeps_env_name_and_one_across_libraries_is_refused():
    assert env_overrides(["-m", "env=Acrobot-v1,cartpole"]) == ["-m", "env=cartpole", "env.name=Acrobot-v1,CartPole-v1"]
    assert env_overrides(["-m", "env=cartpole,pendulum"]) == ["-m", "env=cartpole,pendulum"]
    with pytest.raises(ConfigError, match="a sweep's environments must share one env library"):
        env_overrides(["-m", "env=Acrobot-v1,walker-run"])


def test_an_env_factory_is_a_gymnasium_env_by_its_name():
    spec = EnvSpec.from_env(make_env(f"{__name__}:make_acrobot", seed=0))
    assert (spec.obs_dim, spec.num_actions) == (6, 3)
    assert factory_name(make_acrobot) == f"{__name__}:make_acrobot"
    with pytest.raises(ConfigError, match="returned NoneType, not a gymnasium.Env"):
        make_env(f"{__name__}:make_nothing", library="gymnasium")
    with pytest.raises(ConfigError, match="env.name 'no_such_module_here:make': cannot import 'no_such_module_here'"):
        make_env("no_such_module_here:make")


@pytest.mark.parametrize("factory", [lambda: make_acrobot(), partial(gymnasium.make, "Acrobot-v1")])
def test_an_env_factory_without_a_name_to_import_is_refused(factory):
    with pytest.raises(ConfigError, match="must be a function or class defined at the top level of a module"):
        factory_name(factory)


def test_learn_takes_env_as_an_id_or_a_factory_and_total_frames():
    assert learn_settings({"algo": "ppo", "env": make_acrobot, "total_frames": 4096}) == {
        "algo": "ppo", "env": f"{__name__}:make_acrobot", "actors.total_frames": 4096}


def test_learn_given_an_environment_as_its_experiment_says_to_name_it_env():
    with pytest.raises(ConfigError, match=r"'CartPole-v1' is an environment, not an experiment: "
                                          r"say actorq.learn\(algo=ALGO, env='CartPole-v1'\)"):
        actorq.learn("CartPole-v1")


def test_rl_zoo_flags_that_are_keys_are_key_value():
    argv = flag_overrides(["--algo", "ppo", "--env", "Acrobot-v1", "--seed=3", "--actors.total-frames", "4096", "-m"])
    assert argv == ["algo=ppo", "env=Acrobot-v1", "seed=3", "actors.total_frames=4096", "-m"]
    assert flag_overrides(["--experiment", "ppo_cartpole", "--cfg", "job"]) == ["+experiment=ppo_cartpole", "--cfg", "job"]


@pytest.mark.parametrize(("argv", "say"), [
    (["--algo", "ppo", "-n", "1000"], "-n: actorq train takes KEY=VALUE, not this flag: say actors.total_frames=1000"),
    (["--eval-freq", "500"], "say eval.every_frames=500"),
    (["--algo"], "--algo: actorq train takes KEY=VALUE, not this flag: say algo=VALUE"),
    (["--tensorboard-log", "tb"], "say KEY=tb (actorq train --help lists the keys)"),
])
def test_other_flags_are_refused_in_one_line_with_the_key_value_form(argv, say, capsys):
    with pytest.raises(SystemExit) as exited:
        cli(["train", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and say in err


@pytest.mark.parametrize(("override", "closest"), [
    ("replay.capasity=10", "replay.capacity"), ("capasity=10", "replay.capacity"), ("algo.lrr=1", "algo.lr"),
    ("eval.stop_at=3", "eval.stop_at_return"), ("env.nam=x", "env.name")])
def test_an_unknown_key_names_the_closest_key_not_hydras_plus(override, closest):
    key = override.split("=")[0]
    assert composition_error([override]) == f"Could not override '{key}': no such key; did you mean {closest}?"
