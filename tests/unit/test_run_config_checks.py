"""Bad values stop a run with one clear ConfigError before any actor process starts."""

import multiprocessing

import pytest

from actorq.errors import ConfigError
from actorq.train import train
from tests.conftest import TINY

CASES = [
    ("seed=-1", "seed must be an integer in [0, 2**32), got -1"),
    ("seed=1.5", "seed must be an integer"),
    ("algo.lr=-1", "DQN: lr must be positive, got -1"),
    ("algo.lr=nan", "lr must be a finite number, got nan"),
    ("algo.gamma=1.5", "gamma must be in (0, 1], got 1.5"),
    ("algo.exploration.start=2", "epsilon (exploration.start/end) must be in [0, 1]"),
    ("algo.exploration.anneal_frames=-5", "exploration.anneal_frames must be >= 0"),
    ("replay.capacity=16", "replay.capacity=16 cannot hold one batch of algo.batch_size=32"),
    ("trainer.max_epochs=2", "trainer.max_epochs must be 1"),
    ("algo.learning_starts=600", "algo.learning_starts=600 must be below actors.total_frames=600"),
    ("actors.frames_per_batch=abc", "actors.frames_per_batch must be an integer, got 'abc'"),
    ("actors.total_frames=0", "actors.total_frames must be positive, got 0"),
    ("actors.init_random_frames=-1", "actors.init_random_frames must be >= 0, got -1"),
    ("actors.max_restarts=-1", "actors.max_restarts must be >= 0, got -1"),
    ("actors.restart_on_failure=maybe", "actors.restart_on_failure must be true or false, got 'maybe'"),
    ("+foo=1", "unknown top-level key(s) foo"),
    ("env.module=no_such_suite_module",
     "env.module: cannot import 'no_such_suite_module': ModuleNotFoundError: No module named 'no_such_suite_module'"),
    ("env.module=[json,3]", "env.module must be a module name or a list of module names, got ['json', 3]"),
    ("trainer.accelerator=gpu", "Trainer: No supported gpu backend found"),
    ("quant.engine=tpu", "quant.engine must be one of"),
    ("trainer.devices=0", "trainer.devices must be a positive integer (learner ranks), got 0"),
    ("+trainer.num_nodes=2", "trainer.num_nodes must be 1: parallel learners run on one machine"),
    ("trainer.devices=3", "algo.batch_size=32 must split evenly over trainer.devices=3 learner ranks"),
    # train() called from Python: Lightning would start the other ranks by running the caller again
    ("trainer.devices=2", "trainer.devices > 1 needs the command line (python -m actorq ...)"),
]


@pytest.mark.parametrize(("override", "message"), CASES, ids=[case[0] for case in CASES])
def test_bad_value_is_refused_before_any_actor_starts(make_cfg, override, message):
    cfg = make_cfg("+experiment=dqn_cartpole", *TINY, "callbacks=no_checkpoint", override)
    with pytest.raises(ConfigError) as error:
        train(cfg)
    assert message in str(error.value)
    assert "\n" not in str(error.value)  # one line
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac", "d4pg"])
def test_actor_critic_learning_rates_are_checked(make_cfg, algo):
    cfg = make_cfg(f"algo={algo}", "env=pendulum", *TINY, "algo.critic_lr=0")
    with pytest.raises(ConfigError, match="critic_lr must be positive, got 0"):
        train(cfg)
