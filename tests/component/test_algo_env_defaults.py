"""``actorq train algo=A env=E`` needs no experiment file: every algorithm composes with every
shipped env whose action space it acts in, from the groups' defaults alone, and passes every
check a run makes before its actors start (:func:`actorq.run.build.check_job`: the learner
built against the env, the collection mode and cadence its family needs). An env it cannot
act in is refused in one line. The training itself at these defaults runs in
``tests/integration/test_algo_quant_matrix.py`` (DQN, SAC, TD3, DDPG, D4PG) and
``tests/integration/test_console.py`` (PPO on HalfCheetah-v5, from the command line)."""

from pathlib import Path

import pytest

import actorq
import actorq.conf
from actorq.run.build import check_job
from actorq.util.errors import ConfigError

CONF = Path(actorq.conf.__file__).resolve().parent
ALGOS = sorted(path.stem for path in (CONF / "algo").glob("*.yaml"))
ENVS = sorted(path.stem for path in (CONF / "env").glob("*.yaml"))
DISCRETE_ENVS = {"cartpole", "breakout", "pong"}
ACTS_IN = {"dqn": "discrete", "ppo": "any"}  # the rest act in continuous spaces


def supports(algo: str, env: str) -> bool:
    space = ACTS_IN.get(algo, "continuous")
    return space == "any" or (space == "discrete") == (env in DISCRETE_ENVS)


def test_the_lists_cover_what_ships():
    assert len(ALGOS) == 6 and len(ENVS) == 9
    assert sum(supports(algo, env) for algo in ALGOS for env in ENVS) == 3 + 9 + 4 * 6


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_runs_on_every_env_it_acts_in_with_no_experiment_file(algo, tmp_path):
    for env in ENVS:
        cfg = actorq.config(f"algo={algo}", f"env={env}", f"run_dir={tmp_path}")
        if supports(algo, env):
            check_job(cfg)
        else:
            with pytest.raises(ConfigError, match="actions"):
                check_job(cfg)
