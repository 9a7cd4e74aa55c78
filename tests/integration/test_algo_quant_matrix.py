"""Every algorithm runs with quantized actors in two actor processes.

Every precision runs with the three kinds of policy network: Q-network (DQN), stochastic
Gaussian (SAC) and deterministic actor (TD3, which DDPG and D4PG share); DDPG and D4PG
run with the int8 and n-bit paths too, SAC with packed int4 (DQN's packed int4 run is in
``test_int4_packed_run.py``).
"""

import pytest
import torch

from actorq.train import train

ALGOS = {
    "dqn": ("env=cartpole", "algo.hidden=[32,32]"),
    "ddpg": ("env=pendulum", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]"),
    "td3": ("env=pendulum", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]"),
    "d4pg": ("env=pendulum", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]"),
    "sac": ("env=pendulum", "algo.actor_hidden=[32,32]", "algo.critic_hidden=[32,32]"),
}
PRECISIONS = {
    "bf16": ("quant.bits=16",),
    "int8-static": ("quant.bits=8", "quant.mode=static"),
    "int8-static-fixed": ("quant.bits=8", "quant.mode=static", "quant.observer=fixed"),
    "int8-dynamic": ("quant.bits=8", "quant.mode=dynamic"),
    "4bit": ("quant.bits=4", "quant.mode=dynamic"),
    "int4-packed": ("quant.bits=4", "quant.format=int4_packed"),
    # A policy wide and deep enough (2048x3) that int8 is measurably faster than fp32 at
    # batch 1 on any x86 CPU, so `auto` takes the quantized path (at 32 wide it keeps fp32
    # and would test nothing). 1024x2 was not: with the first and last layers in fp32 only
    # one layer is int8, and on an AMD EPYC without VNNI it ran 141 us against fp32's 134.
    # An untrained Q-network's two Q-values are nearly tied everywhere (median gap 0.03), so
    # int8 flips 0-6% of its greedy actions on random observations, about the default 5%
    # tolerance (both int8 static recipes alike, depending on the seed): allow 10% here.
    "auto": ("quant.bits=auto", "quant.auto_tolerance=0.1"),
}
# What the actors must end up running, written out independently of the run's own objects:
# the precision's description and the storage type of the hidden layer the actors hold.
EXPECTED = {
    "bf16": ("bf16", torch.bfloat16),
    "int8-static": ("int8 static per_channel fp32-ends", torch.int8),
    "int8-static-fixed": ("int8 static per_channel fp32-ends", torch.int8),
    "int8-dynamic": ("int8 dynamic per_channel fp32-ends", torch.int8),
    "4bit": ("4-bit simulated per_channel", torch.int8),
    "int4-packed": ("int4 packed per_channel", torch.uint8),
    "auto": (None, torch.int8),  # which int8 recipe wins is the machine's call; int8 it is
}
FIDELITY_METRIC = {"dqn": "greedy_agreement", "sac": "kl", "td3": "action_error", "ddpg": "action_error",
                   "d4pg": "action_error"}
WIDE_POLICY = {"dqn": "algo.hidden=[2048,2048,2048]", "sac": "algo.actor_hidden=[2048,2048,2048]",
               "td3": "algo.actor_hidden=[2048,2048,2048]"}
SMALL = ("actors.total_frames=400", "actors.frames_per_batch=100", "actors.init_random_frames=100",
         "actors.num_workers=2", "callbacks.push.every_n_steps=5", "algo.learning_starts=100",
         "algo.batch_size=32", "eval.every_frames=400", "eval.episodes=1", "callbacks=no_checkpoint")


CASES = [(algo, precision) for algo in ("dqn", "sac", "td3") for precision in PRECISIONS if precision != "int4-packed"] + [
    (algo, precision) for algo in ("ddpg", "d4pg") for precision in ("int8-static", "4bit")
] + [("sac", "int4-packed")]  # DQN's run with it: test_int4_packed_run.py


@pytest.mark.parametrize(("algo", "precision"), CASES)
def test_algorithm_runs_with_quantized_actors(make_cfg, algo, precision):
    wide = (WIDE_POLICY[algo],) if precision == "auto" else ()
    summary, objects = train(make_cfg(f"algo={algo}", *ALGOS[algo], *wide, *PRECISIONS[precision], *SMALL))
    assert summary["frames"] >= 400 and summary["learner_steps"] > 0
    assert objects["callbacks"]["push"].pushes >= 1
    described, weight_dtype = EXPECTED[precision]
    quant = objects["experience"].quant
    if precision == "auto":
        choice = objects["precision_choice"]
        assert choice.name.startswith("int8"), choice.timings_us
        # the spec the actors run is the codec the choice names (the engine suffix aside)
        assert quant.codec.name == choice.name.removesuffix("_onednn")
        assert summary["actor_precision"] in ("int8 static per_channel fp32-ends", "int8 dynamic per_channel")
    else:
        assert summary["actor_precision"] == described
    # Each push measured its copy in the policy's own terms, on held-out replay observations.
    fidelity = summary["fidelity"]
    assert fidelity[FIDELITY_METRIC[algo]]["pushes"] == objects["callbacks"]["push"].pushes
    # quant.max_kl=auto: no divergence budget for an off-policy learner, so no fallback either
    assert quant.max_kl is None and "fallback" not in fidelity
    # The network the actors were pushed holds its hidden layer in the precision's storage.
    hidden = objects["experience"].actor_policy.network.payload()["l1_weight"]
    assert hidden.dtype == weight_dtype
    if precision == "4bit":
        assert hidden.min() >= -8 and hidden.max() <= 7 and len(hidden.unique()) <= 16
    assert summary["final_return_quant"] is not None


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_every_learner_runs_under_bf16_autocast(make_cfg, algo):
    """``trainer.precision=bf16-mixed``: the learner's updates under bf16 autocast, with
    prioritized replay (priorities come back from bf16 losses)."""
    summary, objects = train(make_cfg(f"algo={algo}", *ALGOS[algo], *SMALL, "replay.prioritized=true",
                                      "trainer.precision=bf16-mixed"))
    assert objects["trainer"].precision == "bf16-mixed"
    assert summary["learner_steps"] > 0 and summary["final_return"] is not None
    replay = objects["experience"].replay
    assert replay.priorities.max_priority > 1.0  # |TD errors| came back
