"""Each callback on a tiny learner driven by a real Lightning Trainer over real actors."""

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from actorq.callbacks.evaluation import Evaluation
from actorq.callbacks.push import PolicyPush
from actorq.train import train
from tests.conftest import TINY


def test_push_schedule_and_state():
    push = PolicyPush(every_n_steps=10, warmup_steps=25)
    assert not push.should_update(0) and not push.should_update(20)
    assert push.should_update(25)
    push.last_step, push.pushes = 25, 1
    assert not push.should_update(30) and push.should_update(35)
    restored = PolicyPush(every_n_steps=10)
    assert restored.pushes == 0
    restored.load_state_dict(push.state_dict())
    assert restored.last_step == 25 and restored.pushes == 1


def test_callbacks_in_a_real_run(make_cfg, tmp_path):
    cfg = make_cfg("+experiment=dqn_cartpole", *TINY, "callbacks.push.every_n_steps=5")
    summary, objects = train(cfg)
    push, evaluation = objects["callbacks"]["push"], objects["callbacks"]["evaluation"]
    learner = objects["learner"]
    assert push.pushes >= 2 and push.last_step <= learner.learner_steps
    frames = [frames for frames, _ in evaluation.history]
    assert frames == [300, 600]  # every 300 frames; the final one is not repeated
    assert frames[-1] == learner.frames == summary["frames"]
    assert summary["final_return"] == evaluation.history[-1][1]
    # One TensorBoard event per push and per evaluation, never a value repeated at other steps.
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    pushes = events.Scalars("quant/pushes")
    assert [event.value for event in pushes] == list(range(1, push.pushes + 1))
    assert len(events.Scalars("quant/push_bytes")) == push.pushes
    assert [event.step for event in events.Scalars("eval/return_mean")] == frames


def test_checkpoint_keeps_callback_and_learner_state(make_cfg, tmp_path):
    cfg = make_cfg("+experiment=dqn_cartpole", *TINY, "callbacks.push.every_n_steps=5")
    summary, objects = train(cfg)
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    states = checkpoint["callbacks"]
    assert states["PolicyPush"]["pushes"] == objects["callbacks"]["push"].pushes
    evaluation_state = next(v for k, v in states.items() if k.startswith("Evaluation"))
    assert len(evaluation_state["history"]) >= 1
    assert checkpoint["actorq"]["frames"] == summary["frames"]
    # The experience pipeline's state: replay sampling state, the actors' precision and
    # last payload; the run config as the datamodule's hyperparameter.
    experience = checkpoint["Experience"]
    assert experience["replay"]["generator"].dtype == torch.uint8
    assert experience["quant"]["bits"] == 32
    payload = objects["experience"].actor_policy.network.payload()
    assert experience["payload"].keys() == payload.keys()
    assert all(torch.equal(experience["payload"][k], payload[k]) for k in payload)
    assert checkpoint["datamodule_hyper_parameters"]["config"]["env"]["name"] == "CartPole-v1"
    assert len(checkpoint["lr_schedulers"]) == 1  # dqn decays its learning rate


@pytest.mark.parametrize("batched", [True, False], ids=["a batch of envs", "one env"])
def test_fp32_and_quantized_policies_are_evaluated_on_the_same_episodes(batched):
    """A quantized copy that acts exactly as the fp32 policy scores exactly its return; later
    evaluations see other episodes. Evaluations play their episodes side by side in a lean
    batch of envs where the suite has one, else one after the other in one env."""
    from types import SimpleNamespace

    from actorq.envs import make_env
    from actorq.envs import make_batched_env
    from actorq.quant import QuantSpec

    def make_eval_env(episodes, seed):
        if batched:
            return make_batched_env("CartPole-v1", episodes, seed=seed, library="gymnasium")
        return make_env("CartPole-v1", seed=seed, library="gymnasium")

    def lean_towards_the_pole(observation):  # returns of a few dozen, varying with the start state
        return (observation[..., 2] > 0).long()

    class SameActions(torch.nn.Module):  # the "quantized" copy: the same action, as two Q-values
        def forward(self, observation):
            action = lean_towards_the_pole(observation)
            return torch.nn.functional.one_hot(action, 2).float()

    experience = SimpleNamespace(
        spec=SimpleNamespace(seed=0), quant=QuantSpec(bits=8), actor_policy=SimpleNamespace(network=SameActions()),
        make_eval_env=make_eval_env,
    )
    learner = SimpleNamespace(act=lean_towards_the_pole, frames=0, spec=SimpleNamespace(discrete=True))
    evaluation = Evaluation(every_frames=10, episodes=5)
    trainer = SimpleNamespace(datamodule=experience, logger=None)
    for frames in (10, 20, 30):
        learner.frames = frames
        evaluation.evaluate(trainer, learner)
    assert evaluation.history_quant == evaluation.history
    assert len({mean for _, mean in evaluation.history}) == 3, evaluation.history
    assert tuple(evaluation._env.batch_size) == ((5,) if batched else ())


def test_frame_checkpoint_validates_arguments(tmp_path):
    import pytest

    from actorq.callbacks.checkpoint import FrameCheckpoint

    with pytest.raises(ValueError, match="checkpoint.every_frames must be a positive integer or null, got 0"):
        FrameCheckpoint(dirpath=str(tmp_path), every_frames=0)
    with pytest.raises(ValueError, match="checkpoint.keep_last must be a positive integer or -1"):
        FrameCheckpoint(dirpath=str(tmp_path), every_frames=10, keep_last=0)
    only_last = FrameCheckpoint(dirpath=str(tmp_path), every_frames=None)
    assert not only_last.should_update(10**9) and only_last.save_top_k == 0


def test_frame_checkpoint_saves_every_n_frames_before_learning_starts_too(make_cfg, tmp_path):
    cfg = make_cfg("+experiment=dqn_cartpole", *TINY, "algo.learning_starts=400", "~callbacks.carbon",
                   "checkpoint.every_frames=100", "checkpoint.keep_last=-1")
    train(cfg)
    names = sorted(path.name for path in (tmp_path / "checkpoints").iterdir())
    assert names == [f"frames={frames}.ckpt" for frames in (100, 200, 300, 400, 500, 600)] + ["last.ckpt"]
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["actorq"]["frames"] == 600


def test_a_checkpoint_from_before_the_push_rename_restores_the_count():
    restored = PolicyPush(every_n_steps=10)
    restored.load_state_dict({"last_step": 40, "broadcasts": 4})
    assert (restored.last_step, restored.pushes) == (40, 4)


def test_sampled_evaluation_draws_from_the_policy_of_each_precision():
    """``eval.deterministic=false`` plays the policies' ``sample`` (here: always the other
    action than the greedy one), for the fp32 policy and the actors' copy; a learner whose
    policy cannot sample is refused before the run starts."""
    from types import SimpleNamespace

    from actorq.envs import make_batched_env
    from actorq.quant import QuantSpec
    from actorq.util.errors import ConfigError

    class Policy(torch.nn.Module):
        def forward(self, observation):  # greedy: lean towards the pole (returns of a few dozen)
            return torch.nn.functional.one_hot((observation[..., 2] > 0).long(), 2).float()

        def sample(self, observation):  # away from it: the pole falls within a dozen steps
            return (observation[..., 2] <= 0).long()

    experience = SimpleNamespace(
        spec=SimpleNamespace(seed=0), quant=QuantSpec(bits=8), actor_policy=SimpleNamespace(network=Policy()),
        make_eval_env=lambda episodes, seed: make_batched_env("CartPole-v1", episodes, seed=seed, library="gymnasium"),
    )
    learner = SimpleNamespace(behaviour_network=Policy(), device=torch.device("cpu"), frames=10, stochastic=True,
                              spec=SimpleNamespace(discrete=True))
    learner.act = lambda observation: learner.behaviour_network(observation).argmax(-1)
    trainer = SimpleNamespace(datamodule=experience, logger=None)
    greedy, sampled = Evaluation(every_frames=10, episodes=5), Evaluation(every_frames=10, episodes=5,
                                                                          deterministic=False)
    for evaluation in (greedy, sampled):
        evaluation.on_fit_start(trainer, learner)
        evaluation.evaluate(trainer, learner)
    assert sampled.history_quant == sampled.history
    assert sampled.history[0][1] < 15 < greedy.history[0][1], (sampled.history, greedy.history)
    with pytest.raises(ConfigError, match="eval.deterministic=false samples actions from a stochastic policy"):
        sampled.on_fit_start(trainer, SimpleNamespace(stochastic=False))
