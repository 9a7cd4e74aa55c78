"""PPO on Atari Breakout from pixels with int8 convolutional actors: a short run of the
``ppo_breakout`` experiment, end to end (actor worker, lean rollout of uint8 frames, pushes of
the int8 conv payload, the learner's shared-trunk updates, evaluation on whole games)."""

import numpy as np
import pytest
import torch

from actorq.quant import onednn
from actorq.train import train
from actorq.util.memory_format import uses_channels_last

pytest.importorskip("ale_py")

# quant.bits=8 on frames: plain int8 tensors where torch has oneDNN's kernels, else torch.ao's
INT8 = "int8 static per_channel fp32-ends" + (" plain" if onednn.available() else "")
# the payload's first convolution's codes and the Nature-CNN's output layer's weight (kept fp32)
FIRST_CONV, OUTPUT_LAYER = ("w0_codes", "w4_weight") if onednn.available() else ("0__convs__0__weight", "1__weight")
SHORT = ("actors.total_frames=2048", "actors.envs_per_worker=4", "actors.frames_per_batch=512",
         "algo.minibatch_size=128", "quant.calibration_samples=64", "eval.episodes=1", "eval.max_steps=200",
         "callbacks=no_checkpoint")


def test_ppo_trains_on_breakout_frames_with_int8_convolutional_actors(make_cfg):
    summary, objects = train(make_cfg("+experiment=ppo_breakout", "quant.bits=8", *SHORT))
    experience = objects["experience"]
    assert summary["frames"] >= 2048 and summary["learner_steps"] == 4 * 4 * 4  # rollouts x epochs x minibatches
    assert summary["actor_precision"] == INT8
    rollout = experience.feed.last
    assert rollout["observation"].dtype == torch.uint8 and rollout["observation"].shape[-3:] == (4, 84, 84)
    assert rollout["next", "observation"].dtype == torch.uint8
    payload = experience.actor_policy.network.payload()
    assert payload[FIRST_CONV].dtype == torch.int8  # the actors ran int8 convolutions
    pushes = objects["callbacks"]["push"].pushes
    # Every push after the first (which has no held-out rollout yet) measured its copy's KL.
    assert pushes >= 4 and summary["fidelity"]["kl"]["pushes"] == pushes - 1
    # On frames the actors collect as the learner updates (actors.collection=auto), one version
    # behind: each rollout is collected while the learner trains on the one before, none waits.
    assert objects["learner"].asynchronous and summary["behaviour_correction"]["policy_lag"] == 1
    # The actors' recorded log-probabilities are the int8 copy's own, recomputed in the learner
    # for the steps that ran the version pushed last, at the pushes where an arrived rollout had some.
    recorded = summary["fidelity"]["log_prob_error"]
    assert recorded["pushes"] >= 1 and recorded["worst"] < 1e-4
    assert summary["final_return"] is not None and summary["final_return_quant"] is not None
    precision = summary["learner_precision"]  # auto timed both precisions in both layouts, and runs its pick
    layouts = {"32-true", "bf16-mixed", "32-true channels-last", "bf16-mixed channels-last"}
    assert precision["choice"] == "auto" and layouts <= set(precision["timings_ms"])
    assert uses_channels_last(objects["learner"]) == precision["channels_last"]
    # algo.micro_batch_size=auto timed the minibatch of 128 whole and in parts of 64 and 32, and runs its pick
    assert precision["micro_batch_size"] in (128, 64, 32)
    assert objects["learner"].micro_batch_size == precision["micro_batch_size"]
    assert len(precision["timings_ms"]) == len(layouts) + 2


def test_dqn_trains_on_breakout_from_a_replay_that_stores_each_frame_once(make_cfg):
    summary, objects = train(make_cfg(
        "+experiment=dqn_breakout", "quant.bits=8", "actors.num_workers=2", "actors.envs_per_worker=2",
        "actors.frames_per_batch=64", "actors.total_frames=1024", "actors.init_random_frames=256",
        "algo.learning_starts=256", "algo.batch_size=16", "replay.capacity=4000", "quant.calibration_samples=32",
        "eval.episodes=1", "eval.max_steps=100", "callbacks=no_checkpoint"))
    replay = objects["experience"].replay
    assert type(replay).__name__ == "FrameReplay" and len(replay._rings) == 4  # a ring per worker env
    assert replay.stream_breaks == 0  # each ring one env's steps, random frames included
    assert replay.frames.dtype == np.uint8 and replay.frames.shape[-2:] == (84, 84)  # one frame per slot
    assert len(replay) > 900 and summary["learner_steps"] >= 150  # 0.25 updates per frame after 256
    assert summary["actor_precision"] == INT8
    payload = objects["experience"].actor_policy.network.payload()
    assert payload[FIRST_CONV].dtype == torch.int8  # int8 convolutions, fp32 Q-values
    assert payload[OUTPUT_LAYER].dtype == torch.float32
    # Every push measured its copy's greedy agreement on frames drawn apart from its calibration's.
    pushes = objects["callbacks"]["push"].pushes
    assert pushes >= 1 and summary["fidelity"]["greedy_agreement"]["pushes"] == pushes
    assert summary["final_return"] is not None and summary["final_return_quant"] is not None
