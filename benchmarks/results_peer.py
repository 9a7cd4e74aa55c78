"""The Stable-Baselines3 side of ``python -m benchmarks.results``: the same algorithm, task,
hyperparameters, frame budget and evaluation schedule as our cells, on the same machine.

Evaluation is ours' twin: every ``eval_every`` frames and at the end, ``eval_episodes``
episodes (greedy, or sampled where the task's ``eval_deterministic`` is False) on a separate
environment seeded ``seed + 10000 + k`` for the ``k``-th evaluation; the time it takes counts
in the wall-clock, as ours does. An Atari task's evaluation plays SB3's policy in our own
evaluation env (whole games, raw scores, the same preprocessing), through the very code our
evaluation runs. The curve's seconds run from the start of ``learn()`` (the first collected
frame), as ours run from the first collected frame.
"""

from __future__ import annotations

import statistics
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

ALGORITHMS = {"DQN": DQN, "SAC": SAC, "TD3": TD3, "PPO": PPO}
VEC_ENVS = {"dummy": DummyVecEnv, "subproc": SubprocVecEnv}
ACTIVATIONS = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}
EVAL_SEED_OFFSET = 10_000  # as actorq.callbacks.evaluation.Evaluation's


class ScheduledEvaluation(BaseCallback):
    """Episodes of the model's policy at each multiple of ``every`` frames and at the end;
    ``curve`` holds ``{"frames", "wall_s", "return"}`` per evaluation. ``atari_game`` plays
    them in our own Atari evaluation env, all ``episodes`` side by side as ours does."""

    def __init__(self, env_id: str, every: int, episodes: int, seed: int, deterministic: bool = True,
                 atari_game: str | None = None):
        super().__init__()
        self.atari_game = atari_game
        self.env = None if atari_game else gym.make(env_id)
        self.every, self.episodes, self.seed, self.deterministic = every, episodes, seed, deterministic
        self.curve: list[dict] = []
        self.started = 0.0
        self.evaluated = 0

    def _on_training_start(self) -> None:
        self.started = time.perf_counter()

    def _on_step(self) -> bool:
        # A vectorized env counts n_envs frames a step: evaluate on crossing a multiple.
        if self.num_timesteps // self.every > self.evaluated:
            self.evaluated = self.num_timesteps // self.every
            self.evaluate()
        return True

    def _on_training_end(self) -> None:
        if not self.curve or self.curve[-1]["frames"] != self.num_timesteps:
            self.evaluate()

    def evaluate(self) -> None:
        seed = self.seed + EVAL_SEED_OFFSET + len(self.curve)
        if self.atari_game:
            returns = self.atari_returns(seed)
        else:
            returns = [self.episode_return(seed if episode == 0 else None) for episode in range(self.episodes)]
        self.curve.append({"frames": int(self.num_timesteps), "wall_s": round(time.perf_counter() - self.started, 2),
                           "return": statistics.fmean(returns)})

    def episode_return(self, seed: int | None) -> float:
        observation, _ = self.env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            action, _ = self.model.predict(policy_observation(self.model, observation), deterministic=self.deterministic)
            observation, reward, terminated, truncated, _ = self.env.step(action)
            total += float(reward)
            done = terminated or truncated
        return total

    def atari_returns(self, seed: int) -> list[float]:
        """Whole games' raw scores in our evaluation env (:func:`actorq.envs.make_batched_env`
        with ``evaluation=True``, played by :func:`actorq.envs.rollout_return`), as our
        evaluation plays them; SB3's policy takes the same ``[4, 84, 84]`` uint8 frames."""
        from actorq.envs import make_batched_env, rollout_return

        if self.env is None:
            self.env = make_batched_env(self.atari_game, self.episodes, seed=seed, library="atari", evaluation=True)
        self.env.set_seed(seed)

        def act(observation: torch.Tensor) -> torch.Tensor:
            action, _ = self.model.predict(observation.numpy(), deterministic=self.deterministic)
            return torch.as_tensor(action)

        return rollout_return(self.env, act, self.episodes)


def policy_observation(model, observation: np.ndarray) -> np.ndarray:
    """What the model's policy takes for a raw ``observation``: normalized with the training
    env's running statistics where it was trained behind ``VecNormalize`` (without them an
    evaluation would play raw observations into a policy trained on normalized ones)."""
    normalizer = model.get_vec_normalize_env()
    return observation if normalizer is None else normalizer.normalize_obs(observation)


def make_model(task, seed: int, budget):
    """SB3's algorithm for ``task`` with the task's settings (``action_noise_std`` becomes
    SB3's Gaussian action noise)."""
    kwargs = dict(task.peer_kwargs)
    if task.peer == "PPO":
        return make_on_policy_model(task, seed, kwargs)
    env = gym.make(task.env_id)
    noise_std = kwargs.pop("action_noise_std", None)
    if noise_std is not None:
        size = env.action_space.shape[-1]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(size), noise_std * np.ones(size))
    if budget.learning_starts is not None:
        kwargs["learning_starts"] = budget.learning_starts
    if task.peer == "DQN":  # its schedule is a fraction of the budget: keep it in frames
        kwargs["exploration_fraction"] = min(1.0, kwargs["exploration_fraction"] * task.frames / budget.frames)
    return ALGORITHMS[task.peer]("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)


def make_on_policy_model(task, seed: int, kwargs: dict):
    """SB3's PPO on ``n_envs`` envs behind the ``vec_env`` named (``dummy``: in this process,
    ``subproc``: a process each), with RL Zoo's ``lin_X`` schedules as SB3 callables and its
    ``normalize: true`` as ``VecNormalize`` with the algorithm's gamma."""
    vec_env = VEC_ENVS[kwargs.pop("vec_env")]
    if task.atari_game:
        return PPO("CnnPolicy", atari_env(task.env_id, kwargs.pop("n_envs"), seed, vec_env), seed=seed, device="cpu",
                   verbose=0, **schedules(kwargs))
    env = make_vec_env(task.env_id, n_envs=kwargs.pop("n_envs"), seed=seed, vec_env_cls=vec_env)
    if kwargs.pop("normalize", False):
        env = VecNormalize(env, gamma=kwargs["gamma"])
    kwargs = schedules(kwargs)
    policy_kwargs = dict(kwargs.pop("policy_kwargs", {}))
    if "activation_fn" in policy_kwargs:
        policy_kwargs["activation_fn"] = ACTIVATIONS[policy_kwargs["activation_fn"]]
    return PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, policy_kwargs=policy_kwargs, **kwargs)


def schedules(kwargs: dict) -> dict:
    """``kwargs`` with RL Zoo's ``lin_X`` learning rate and clip range as SB3 callables."""
    kwargs = dict(kwargs)
    for name in ("learning_rate", "clip_range"):
        value = kwargs.get(name)
        if isinstance(value, str) and value.startswith("lin_"):
            kwargs[name] = linear_schedule(float(value[4:]))
    return kwargs


def atari_env(env_id: str, n_envs: int, seed: int, vec_env):
    """SB3's Atari training env as RL Zoo builds it: ``make_atari_env`` (its ``AtariWrapper``:
    no-ops, frame skip 4 with max-pool, episodic life, FIRE on reset, clipped rewards, 84x84
    grayscale) and ``VecFrameStack`` of 4; ``CnnPolicy`` moves the channels first itself."""
    import ale_py
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    return VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=vec_env), n_stack=4)


def gradient_steps(model) -> int:
    """The optimizer steps the model made, as ours count them: SB3's PPO counts an epoch as
    one update (``_n_updates``), whatever its minibatches; its off-policy algorithms count steps."""
    if isinstance(model, PPO):
        minibatches = -(-model.n_steps * model.n_envs // model.batch_size)
        return int(model._n_updates) * minibatches
    return int(model._n_updates)


class linear_schedule:  # noqa: N801 - an SB3 schedule is a callable of the progress remaining
    """``start * progress_remaining`` (RL Zoo's ``lin_X``), a class so the model pickles."""

    def __init__(self, start: float):
        self.start = start

    def __call__(self, progress_remaining: float) -> float:
        return self.start * progress_remaining


def time_train(model) -> dict[str, float]:
    """Counts the seconds ``model``'s ``train()`` takes (its updates), from now on, in the dict returned."""
    learning = {"seconds": 0.0}
    train = model.train

    def timed_train(*args, **kwargs):
        started = time.perf_counter()
        train(*args, **kwargs)
        learning["seconds"] += time.perf_counter() - started

    model.train = timed_train
    return learning


def run_peer(task, seed: int, budget) -> dict:
    """One SB3 run; updates/s counts the time inside ``train()`` alone, as ours counts the
    learner's time alone."""
    model = make_model(task, seed, budget)
    learning = time_train(model)
    evaluation = ScheduledEvaluation(task.env_id, budget.eval_every, budget.eval_episodes, seed,
                                     task.eval_deterministic, task.atari_game)
    model.learn(total_timesteps=budget.frames, callback=evaluation)
    updates = gradient_steps(model)
    return {"frames": int(model.num_timesteps), "final_return": evaluation.curve[-1]["return"],
            "final_return_actors": None, "actor_precision": "fp32 (SB3)", "updates": updates,
            "updates_per_s": round(updates / learning["seconds"], 1) if learning["seconds"] else None,
            "curve": evaluation.curve, "peer": f"stable_baselines3.{task.peer}", "peer_kwargs": repr(task.peer_kwargs)}
