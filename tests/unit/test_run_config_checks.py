"""Bad values stop a run with one clear ConfigError before any actor process starts."""

import multiprocessing

import pytest

from actorq.run.checks import check_one_spelling, check_stop_at_return, composition_error, unread_keys
from actorq.util.errors import ConfigError
from actorq.run.launch import sweep_error
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
    # a key added to a group whose file lists every key: a typo Hydra's `+` hint would let through
    ("+replay.capasity=10", "replay.capasity: no such key, and nothing would read it; did you mean replay.capacity?"),
    ("+actors.num_worker=2", "did you mean actors.num_workers?"),
    ("+quant.bitz=8", "did you mean quant.bits?"),
    ("env.module=no_such_suite_module",
     "env.module: cannot import 'no_such_suite_module': ModuleNotFoundError: No module named 'no_such_suite_module'"),
    ("env.module=[json,3]", "env.module must be a module name or a list of module names, got ['json', 3]"),
    ("trainer.accelerator=gpu", "Trainer: No supported gpu backend found"),
    ("quant.bits=8 quant.engine=tpu", "quant.engine must be one of"),
    ("trainer.devices=0", "trainer.devices must be a positive integer (learner ranks), got 0"),
    ("+trainer.num_nodes=2", "trainer.num_nodes must be 1: parallel learners run on one machine"),
    ("trainer.devices=3", "algo.batch_size=32 must split evenly over trainer.devices=3 learner ranks"),
    # train() called from Python: Lightning would start the other ranks by running the caller again
    ("trainer.devices=2", "trainer.devices > 1 needs the command line (actorq train ...)"),
    ("eval.every_frames=0", "eval.every_frames must be positive, got 0"),
    ("eval.episodes=0", "eval.episodes must be positive, got 0"),
    ("replay.prioritized=yes", "replay.prioritized must be true or false, got 'yes'"),
    ("actors.lean_envs=maybe", "actors.lean_envs must be true or false, got 'maybe'"),
    ("algo.double=no", "algo.double must be true or false, got 'no'"),  # unchecked, 'no' is a truthy string: double DQN on
    # keys nothing reads with the run's other settings
    ("replay.alpha=-1", "replay.alpha=-1 needs replay.prioritized=true: nothing reads it otherwise"),
    ("replay.beta=0.5", "replay.beta=0.5 needs replay.prioritized=true"),
    ("replay.shared=true replay.eps=0.1", "replay.eps=0.1 needs replay.prioritized=true"),
    ("replay.fanout=8", "replay.fanout=8 needs replay.prioritized=true or replay.shared=true"),
    ("actors.ray.num_cpus=2", "actors.ray.num_cpus=2 needs actors.backend=ray"),
    ("actors.ray.resources={node:1}", "actors.ray.resources.node=1 needs actors.backend=ray"),
    ("actors.collection=sideways", "actors.collection must be auto, async, lockstep, got 'sideways'"),
    ("quant.engine=x86", "quant.engine=x86 needs quant.bits=8 or quant.bits=auto"),
    ("quant.bits=16 quant.engine=x86", "quant.engine=x86 needs quant.bits=8 or quant.bits=auto"),
    ("quant.bits=8 quant.auto_tolerance=0.1", "quant.auto_tolerance=0.1 needs quant.bits=auto"),
    ("quant.bits=8 quant.max_kl=0.1", "quant.max_kl=0.1 needs a stochastic policy (algo=ppo or algo=sac)"),
    # one spelling for each setting
    ("callbacks.evaluation.every_frames=100", "callbacks.evaluation.every_frames is set with eval.every_frames; "
                                              "say eval.every_frames=100"),
    ("callbacks.evaluation.episodes=2", "say eval.episodes=2"),
    ("callbacks.evaluation.stop_at_return=475", "say eval.stop_at_return=475"),
    # the return that stops the run
    ("eval.stop_at_return=abc", "eval.stop_at_return must be a number (the eval return that stops the run) or "
                                "null, got 'abc'"),
    ("eval.stop_at_return=nan", "eval.stop_at_return must be a number"),
    ("eval.stop_at_return=true", "eval.stop_at_return must be a number"),
    ("eval.stop_at_return=475 ~callbacks.evaluation",
     "eval.stop_at_return=475 needs callbacks.evaluation: nothing reads it otherwise"),
]


@pytest.mark.parametrize(("override", "message"), CASES, ids=[case[0] for case in CASES])
def test_bad_value_is_refused_before_any_actor_starts(make_cfg, override, message):
    cfg = make_cfg("+experiment=dqn_cartpole", *TINY, "callbacks=no_checkpoint", *override.split())
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


@pytest.mark.parametrize("key", ["batch_critics", "critic_layer_norm", "compile_losses"])
def test_actor_critic_switches_are_checked(make_cfg, key):
    cfg = make_cfg("algo=td3", "env=pendulum", *TINY, f"algo.{key}=1")
    with pytest.raises(ConfigError, match=f"algo.{key} must be true or false, got 1"):
        train(cfg)


def test_keys_read_with_the_run_settings_pass(make_cfg):
    cfg = make_cfg("replay.prioritized=true", "replay.alpha=0.7", "replay.fanout=8", "quant.bits=8",
                   "quant.engine=x86", "eval.every_frames=100")
    assert unread_keys(cfg) == {}
    check_one_spelling(cfg)
    assert unread_keys(make_cfg("replay.shared=true", "replay.fanout=8")) == {}


def test_stop_at_return_is_refused_with_parallel_learners(make_cfg):
    """Ranks 1..N-1 follow rank 0's batches to the end of the budget: stopping rank 0 alone
    would leave them waiting."""
    with pytest.raises(ConfigError, match="eval.stop_at_return stops a single learner; with trainer.devices=2"):
        check_stop_at_return(make_cfg("eval.stop_at_return=475", "trainer.devices=2"))
    check_stop_at_return(make_cfg("eval.stop_at_return=-150.5"))
    check_stop_at_return(make_cfg("eval.stop_at_return=null", "trainer.devices=2"))


def test_checkpoint_keys_have_one_spelling(make_cfg):
    with pytest.raises(ConfigError, match="callbacks.checkpoint.keep_last is set with checkpoint.keep_last; "
                                          "say checkpoint.keep_last=5"):
        check_one_spelling(make_cfg("callbacks=default", "callbacks.checkpoint.keep_last=5"))
    check_one_spelling(make_cfg("callbacks=default", "checkpoint.keep_last=5"))
    check_one_spelling(make_cfg("~callbacks.checkpoint"))


@pytest.mark.parametrize(("override", "spelling"), [("replay=prioritized", "replay.prioritized=true"),
                                                    ("replay=uniform", "replay.prioritized=true")])
def test_a_replaced_spelling_names_the_key(override, spelling):
    error = composition_error([override])
    assert error.startswith(f"{override}: the replay group has one option") and spelling in error


def test_a_sweep_runs_with_a_key_only_some_jobs_read_and_warns_once(capsys):
    assert sweep_error(["-m", "+experiment=dqn_cartpole", "quant.bits=32,8", "quant.engine=x86"]) is None
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == ["actorq: warning: sweep job 0 ignores quant.engine (quant.engine=x86 needs quant.bits=8 or "
                        "quant.bits=auto: nothing reads it otherwise)"]


def test_a_sweep_whose_jobs_all_ignore_a_key_is_refused():
    error = sweep_error(["-m", "+experiment=dqn_cartpole", "seed=0,1", "replay.alpha=0.5"])
    assert error.startswith("sweep job 0 (+experiment=dqn_cartpole seed=0 replay.alpha=0.5): replay.alpha=0.5 needs "
                            "replay.prioritized=true") and "no job of the sweep reads it" in error


def test_a_sweep_over_an_experiment_of_ones_own_is_checked_in_its_config_folder(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nseed: 7\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path}]"
    assert sweep_error(["-m", searchpath, "+experiment=mine", "quant.bits=32,8"]) is None
    error = sweep_error(["-m", searchpath, "+experiment=mine", "quant.bits=32,8", "replay.alpha=0.5"])
    assert error.startswith("sweep job 0 (hydra.searchpath=") and \
        "+experiment=mine quant.bits=32 replay.alpha=0.5): replay.alpha=0.5 needs replay.prioritized=true" in error
