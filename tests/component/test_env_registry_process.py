"""The env suite registry in a fresh interpreter: what choosing a suite imports."""

import subprocess
import sys


def test_a_gym_id_without_a_library_does_not_load_dm_control():
    code = (
        "import sys; from actorq.envs import make_env; make_env('CartPole-v1'); "
        "assert 'dm_control' not in sys.modules, 'dm_control was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
