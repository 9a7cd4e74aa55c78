"""The env suite registry in a fresh interpreter: what choosing a suite imports."""

import subprocess
import sys


def test_a_gym_id_without_a_library_does_not_load_dm_control():
    code = (
        "import sys; from actorq.envs import make_env; make_env('CartPole-v1'); "
        "assert 'dm_control' not in sys.modules, 'dm_control was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_gym_id_without_a_library_does_not_load_ale_py():
    result = fresh("import sys; from actorq.envs import make_env; make_env('CartPole-v1'); "
                   "assert 'ale_py' not in sys.modules, 'ale_py was imported'")
    assert result.returncode == 0, result.stderr[-2000:]


def test_an_atari_id_is_known_whatever_was_asked_before():
    """ale-py registers its gymnasium ids when it is first imported: the first question about
    an Atari id gets the same answer as any later one."""
    result = fresh(
        "from actorq.envs import find_suite\n"
        "from actorq.util.errors import ConfigError\n"
        "try:\n"
        "    find_suite('BreakoutNoFrameskip-v4', library='gymnasium')\n"
        "except ConfigError as error:\n"
        "    print(error)\n"
        "print(find_suite('ALE/Pong-v5').name)\n")
    assert result.returncode == 0, result.stderr[-2000:]
    refused, suite = result.stdout.splitlines()
    assert "'BreakoutNoFrameskip-v4' is not in library 'gymnasium' but in 'atari': set env.library=atari" in refused
    assert suite == "atari"
