"""Every algorithm runs with quantized actors in two actor processes.

Every precision runs with the three kinds of policy network: Q-network (DQN), stochastic
Gaussian (SAC) and deterministic actor (TD3, which DDPG and D4PG share); DDPG and D4PG
run with the int8 and n-bit paths too.
"""

import pytest

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
    "int8-dynamic-fixed": ("quant.bits=8", "quant.mode=dynamic", "quant.observer=fixed"),
    "4bit": ("quant.bits=4", "quant.mode=dynamic"),
    "auto": ("quant.bits=auto",),
}
SMALL = ("actors.total_frames=400", "actors.frames_per_batch=100", "actors.init_random_frames=100",
         "actors.num_workers=2", "callbacks.broadcast.every_n_steps=5", "algo.learning_starts=100",
         "algo.batch_size=32", "eval.every_frames=400", "eval.episodes=1", "callbacks=no_checkpoint")


CASES = [(algo, precision) for algo in ("dqn", "sac", "td3") for precision in PRECISIONS] + [
    (algo, precision) for algo in ("ddpg", "d4pg") for precision in ("int8-static", "4bit")
]


@pytest.mark.parametrize(("algo", "precision"), CASES)
def test_algorithm_runs_with_quantized_actors(make_cfg, algo, precision):
    summary, objects = train(make_cfg(f"algo={algo}", *ALGOS[algo], *PRECISIONS[precision], *SMALL))
    broadcast = objects["broadcast"]
    assert summary["frames"] >= 400 and summary["learner_steps"] > 0
    assert broadcast.broadcasts >= 1
    if broadcast.quant.bits != 32:  # auto may keep fp32 for a tiny network
        assert summary["final_return_quant"] is not None
