"""The ``atari`` suite: ale-py's vector env as raw envs whose every step after a reset is its
episode's own, a lost life that ends the learner's episode and not the game, seeded games that
repeat, evaluation on whole games with raw scores, and frames equal to gymnasium's
``AtariPreprocessing`` with frame stacking."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("ale_py")

from actorq.envs import find_suite, make_batched_env, make_env  # noqa: E402
from actorq.envs.atari import AtariEnvs, AtariSuite, atari_game, make_atari  # noqa: E402
from actorq.util.errors import ConfigError  # noqa: E402


class Buffers:
    """The preallocated outputs of one step of ``n`` envs."""

    def __init__(self, n: int):
        self.obs = np.zeros((n, 4, 84, 84), dtype=np.uint8)
        self.reward = np.zeros((n, 1), dtype=np.float32)
        self.terminated = np.zeros((n, 1), dtype=bool)
        self.truncated = np.zeros((n, 1), dtype=bool)

    def step(self, envs: AtariEnvs, actions) -> Buffers:
        envs.step(np.asarray(actions, dtype=np.int64), self.obs, self.reward, self.terminated, self.truncated)
        return self


def started(envs: AtariEnvs, seeds=None) -> Buffers:
    """``envs`` seeded (env ``i`` with ``seeds[i]``) and reset, as a lean env starts them."""
    out = Buffers(envs.n)
    for i in range(envs.n):
        if seeds is not None:
            envs.seed(i, seeds[i])
        envs.reset(i, out.obs[i])
    return out


def play(envs: AtariEnvs, actions: np.ndarray, seeds) -> list[tuple[np.ndarray, ...]]:
    """Each step's outputs (copies) under ``actions[t]``, ended envs reset after their step."""
    out = started(envs, seeds)
    steps = []
    for action in actions:
        out.step(envs, action)
        steps.append((out.obs.copy(), out.reward.copy(), out.terminated.copy(), out.truncated.copy()))
        for i in np.flatnonzero(out.terminated[:, 0] | out.truncated[:, 0]):
            envs.reset(int(i), out.obs[i])
    return steps


def random_actions(envs: AtariEnvs, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, envs.num_actions, size=(steps, envs.n))


def test_the_suite_makes_stacked_uint8_frames_of_each_game():
    suite = find_suite("breakout")
    assert suite.name == "atari" and isinstance(suite, AtariSuite)
    assert {"breakout", "pong"} <= set(suite.names()) and not suite.knows("Breakout")
    envs = suite.make_raw("breakout", 2)
    assert (envs.obs_shape, envs.obs_dtype, envs.obs_dim) == ((4, 84, 84), np.dtype(np.uint8), 4 * 84 * 84)
    assert envs.discrete and envs.num_actions == 4 and not envs.evaluation
    out = started(envs).step(envs, [1, 3])
    assert out.obs[:, -1].any() and not out.obs[:, :2].any()  # two frames so far, zeros before them
    envs.close()


def test_the_suite_knows_ale_pys_gymnasium_ids_with_their_sticky_actions_and_gymnasiums_suite_does_not():
    from actorq.envs.gymnasium import GymnasiumSuite

    suite = AtariSuite()
    assert suite.knows("BreakoutNoFrameskip-v4") and suite.knows("ALE/Pong-v5") and not suite.knows("CartPole-v1")
    assert [atari_game(name) for name in ("ALE/Pong-v5", "PongNoFrameskip-v4", "Pong-v0", "pong")] == [
        ("pong", True), ("pong", False), ("pong", True), ("pong", False)]
    assert {"ALE/Pong-v5", "pong"} <= set(suite.names())
    assert not GymnasiumSuite().knows("ALE/Pong-v5") and "ALE/Pong-v5" not in GymnasiumSuite().names()
    assert find_suite("ALE/Pong-v5").name == "atari"
    envs = suite.make_raw("BreakoutNoFrameskip-v4", 1)
    assert envs.obs_shape == (4, 84, 84) and envs.num_actions == 4
    envs.close()


def test_an_unknown_game_or_no_ale_py_is_a_config_error(monkeypatch):
    with pytest.raises(ConfigError, match="unknown environment 'breakuot' in library 'atari'"):
        find_suite("breakuot", library="atari")
    with pytest.raises(ConfigError, match="unknown Atari game 'breakuot'"):
        AtariSuite().make_raw("breakuot", 1)
    for module in ("ale_py", "ale_py.roms", "ale_py.vector_env"):
        monkeypatch.setitem(sys.modules, module, None)  # as if ale-py were not installed
    assert AtariSuite().names() == [] and not AtariSuite().knows("breakout")
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[atari\]"'):
        AtariSuite().make_raw("breakout", 1)


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.11.2", "0.12.0"])
def test_an_ale_py_older_than_0_12_1_is_a_config_error(monkeypatch, version):
    """Older ale-py has no vector env (0.10), no ``autoreset_mode`` (0.11.0), a crash (0.11.x)
    or a deadlock (0.12.0) on a partial reset: refused in one line, not met mid-run."""
    import ale_py

    monkeypatch.setattr(ale_py, "__version__", version)
    with pytest.raises(ConfigError, match=rf"ale-py 0\.12\.1 or newer, this is {version}: pip install"):
        AtariSuite().make_raw("breakout", 1)


def test_after_a_game_ends_the_next_step_is_the_new_games_first():
    # No random no-ops: every game starts the same, so a restarted game must replay a fresh one.
    options = {"evaluation": True, "noop_max": 0, "max_episode_frames": 4 * 30}
    envs, fresh = AtariEnvs("breakout", 1, **options), AtariEnvs("breakout", 1, **options)
    out = started(envs)
    for action in random_actions(envs, 30):
        before = out.obs.copy()
        out.step(envs, action)
        assert np.array_equal(out.obs[0, :3], before[0, 1:])  # the final observation too: the old game's
    assert out.truncated[0, 0] and not out.terminated[0, 0] and out.reward.shape == (1, 1)
    envs.reset(0, out.obs[0])
    other = started(fresh)
    assert np.array_equal(out.obs, other.obs)
    for action in [[1], [2], [2], [1], [3], [3], [0], [2]] * 3:  # FIRE, then the paddle moves
        assert np.array_equal(out.step(envs, action).obs, other.step(fresh, action).obs)
    assert out.obs[0, -1].any()


def test_a_lost_life_ends_the_learners_episode_and_the_game_goes_on():
    envs = AtariEnvs("breakout", 1)
    out = started(envs, seeds=[7])
    assert envs.lives[0] == 5
    ends, lives = [], []
    for action in random_actions(envs, 400):
        out.step(envs, action)
        if out.terminated[0, 0]:
            final = out.obs[0].copy()
            ends.append(len(lives))
            envs.reset(0, out.obs[0])
            if envs.lives[0] < 5:  # the same game: the next episode starts from the same screen
                assert not out.obs[0, :3].any() and np.array_equal(out.obs[0, -1], final[-1])
                assert np.array_equal(out.step(envs, action).obs[0, 2], final[-1])
                assert not out.obs[0, :2].any() and not out.terminated[0, 0]
        lives.append(int(envs.lives[0]))
        if len(ends) == 6:
            break
    assert [lives[end] for end in ends] == [4, 3, 2, 1, 5, 4]  # a new game only when the last life is lost
    assert not out.truncated.any()


def test_the_step_after_a_lost_life_presses_fire_in_training_and_in_evaluation():
    """A policy that never presses FIRE still plays all five of Breakout's balls, in training
    and in evaluation, as SB3's ``FireResetEnv`` serves them in both of RL Zoo's envs; without
    that FIRE the game waits after the first ball, and without FIRE at reset before it."""
    cases = (({}, 5), ({"evaluation": True}, 5), ({"fire_after_lost_life": False}, 1),
             ({"evaluation": True, "fire_after_lost_life": False}, 1), ({"evaluation": True, "fire_reset": False}, 0))
    for options, balls in cases:
        envs = AtariEnvs("breakout", 1, noop_max=0, **options)
        out = started(envs, seeds=[0])
        lost = 0
        for _ in range(300):
            before = int(envs.lives[0])
            out.step(envs, [0])  # NOOP, always
            lost += int(envs.lives[0] != before)  # a ball lost (at game over: a new game's five lives)
            if envs.lives[0] > before:
                break
        assert lost == balls, options
        envs.close()


def test_a_restarted_game_forgets_the_fire_its_lost_life_left_pending():
    """The step after a lost life sends FIRE to the emulator, but not when the game was
    restarted in between: the new game starts as a fresh one. (No game tried shows a FIRE
    in its first step on screen, so the actions that reach the emulator are recorded.)"""
    envs = AtariEnvs("breakout", 1, noop_max=0)
    sent = []
    step = envs.env.step
    envs.env.step = lambda actions: sent.append(int(actions[0])) or step(actions)

    def lose_a_ball(out):
        lives = int(envs.lives[0])
        for _ in range(300):
            out.step(envs, [0])  # NOOP until the ball is lost
            if envs.lives[0] < lives:
                return out
        raise AssertionError("no ball lost")

    lose_a_ball(started(envs, seeds=[0])).step(envs, [0])
    assert sent[-1] == envs._fire == 1  # served
    lose_a_ball(started(envs, seeds=[0]))
    started(envs, seeds=[0]).step(envs, [0])
    assert sent[-1] == 0
    envs.close()


def test_a_seeded_env_replays_its_game_and_seeds_tell_games_apart():
    seeds = [3, 2**32 - 1]  # TorchRL's seed chain gives seeds up to 2**32
    a, b, c = (AtariEnvs("breakout", 2) for _ in range(3))
    actions = random_actions(a, 80)
    first, again = play(a, actions, seeds), play(b, actions, seeds)
    assert all(np.array_equal(x, y) for step, same in zip(first, again) for x, y in zip(step, same))
    again = play(a, actions, seeds)  # seeding an env that played on restarts its game
    assert all(np.array_equal(x, y) for step, same in zip(first, again) for x, y in zip(step, same))
    other = play(c, actions, [4, 5])
    assert not np.array_equal(np.stack([step[0] for step in first]), np.stack([step[0] for step in other]))


def test_evaluation_plays_whole_games_with_raw_scores():
    """Training and evaluation envs with one seed play the same game; evaluation's episode is
    the whole game and its rewards are the raw ones training clips."""
    for game, steps in (("breakout", 130), ("ms_pacman", 80)):
        train = AtariEnvs(game, 1)  # FIRE after a lost life in both: the two games get the same actions
        evaluation = AtariEnvs(game, 1, evaluation=True)
        actions = random_actions(train, steps)
        trained, evaluated = play(train, actions, [7]), play(evaluation, actions, [7])
        rewards = np.array([step[1][0, 0] for step in evaluated])
        assert np.array_equal([step[1][0, 0] for step in trained], np.sign(rewards))
        assert all(np.array_equal(x[0][0, -1], y[0][0, -1]) for x, y in zip(trained, evaluated))
        ends = [t for t, step in enumerate(evaluated) if step[2][0, 0]]
        if game == "breakout":  # five lives: five learner episodes in one game
            assert ends and sum(step[2][0, 0] for step in trained[: ends[0] + 1]) == 5
        else:
            assert rewards.max() >= 10  # a pellet's raw score
    for evaluating in (True, False):
        env = make_batched_env("breakout", 2, seed=0, evaluation=evaluating)
        assert env.raw.evaluation == evaluating
        env.close()


def test_make_atari_plays_its_preset_training_ends_at_a_lost_life_and_clips_evaluation_neither():
    """``make_atari`` (ale-py's own episodic life: the fleet benchmark's env) with one seed and
    the same actions: in training the first lost life ends an episode and a pellet scores 1,
    in evaluation the game goes on and a pellet scores its 10."""
    played = {}
    for training in (True, False):
        env = make_atari("ms_pacman", num_envs=1, seed=0, training=training)
        _, info = env.reset(seed=0)
        lives, rewards, ends_at_lost_life = int(info["lives"][0]), [], []
        for action in np.random.default_rng(0).integers(0, int(env.single_action_space.n), size=(200, 1)):
            _, reward, terminated, truncated, info = env.step(action)
            rewards.append(float(reward[0]))
            if int(info["lives"][0]) < lives:
                ends_at_lost_life.append(bool(terminated[0] or truncated[0]))
            lives = int(info["lives"][0])
        env.close()
        played[training] = (max(rewards), ends_at_lost_life)
    assert played[True] == (1.0, [True])  # the first lost life ended the episode (ale-py then restarts)
    assert played[False][0] == 10.0 and played[False][1] and not any(played[False][1])


def test_frames_equal_gymnasiums_atari_preprocessing_with_frame_stacking():
    """ale-py's vector env against ``AtariPreprocessing`` + ``FrameStackObservation`` on the v5
    game without sticky actions: with no random no-ops and no FIRE at reset on either side, the
    same seed and actions give the same frames, rewards and ends, pixel for pixel, to game over."""
    import ale_py
    import gymnasium
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gymnasium.register_envs(ale_py)
    game = gymnasium.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0)
    theirs = FrameStackObservation(AtariPreprocessing(game, noop_max=0, frame_skip=4, screen_size=84), 4,
                                   padding_type="zero")
    envs = AtariEnvs("breakout", 1, evaluation=True, noop_max=0, fire_reset=False)
    frames, _ = theirs.reset(seed=0)
    out = started(envs, seeds=[0])
    assert np.array_equal(out.obs[0], frames)
    for action in random_actions(envs, 250, seed=1)[:, 0]:
        frames, reward, terminated, truncated, _ = theirs.step(int(action))
        out.step(envs, [action])
        assert np.array_equal(out.obs[0], frames)
        assert (out.reward[0, 0], out.terminated[0, 0], out.truncated[0, 0]) == (reward, terminated, truncated)
        if terminated:
            break
    assert terminated  # a whole game
    theirs.close()


def test_a_video_frame_is_the_newest_frame_the_agent_sees_four_times_larger():
    from actorq.tools.video import agent_view

    stack = np.zeros((4, 84, 84), dtype=np.uint8)
    stack[-1, 10, 20] = 200  # the newest frame
    stack[0, 0, 0] = 99  # an older one, not shown
    image = agent_view(stack[None])  # as the env holds it: [1, 4, 84, 84]
    assert image.shape == (336, 336, 3) and image.dtype == np.uint8
    assert (image[40:44, 80:84] == 200).all() and image.sum() == 200 * 16 * 3
    assert np.array_equal(agent_view(torch.from_numpy(stack)), image)  # as the policy is given it


def same_game_in_every_env(env, steps: int = 60) -> bool:
    """Whether the lean env's raw Atari envs, seeded differently, play one game under the same
    actions (with no random no-ops and no sticky actions, seeds cannot tell Breakout apart)."""
    raw = env.raw
    out = started(raw, seeds=range(1, raw.n + 1))
    same = True
    for action in random_actions(raw, steps)[:, :1]:
        out.step(raw, np.repeat(action, raw.n))
        same &= all(np.array_equal(out.obs[0], out.obs[i]) for i in range(1, raw.n))
    env.close()
    return same


def balls_lost_without_fire(env, steps: int = 100) -> int:
    """Balls Breakout loses to a policy that never presses FIRE (the first within 30 steps
    when the game presses FIRE itself)."""
    raw = env.raw
    out, lives = started(raw, seeds=[0] * raw.n), int(raw.lives[0])
    for _ in range(steps):
        out.step(raw, np.zeros(raw.n, dtype=np.int64))
    env.close()
    return lives - int(raw.lives[0])


def test_the_suites_options_reach_the_envs_it_makes_for_training_and_for_evaluation():
    def env(envs=3, evaluation=False, **options):
        return make_batched_env("breakout", envs, seed=0, library="atari", evaluation=evaluation, options=options)

    assert not same_game_in_every_env(env())  # up to 30 no-ops: each seed its own game
    assert balls_lost_without_fire(env(1)) > 0
    for evaluation in (False, True):
        assert same_game_in_every_env(env(evaluation=evaluation, noop_max=0))
        assert not same_game_in_every_env(env(evaluation=evaluation, noop_max=0, sticky=True))  # each seed its repeats
        assert balls_lost_without_fire(env(1, evaluation=evaluation, fire_reset=False)) == 0


def test_a_bad_env_option_is_a_config_error_naming_it():
    for options, message in (({"stiky": True}, "env.options.stiky: the atari suite has no such option; it has sticky, "
                                               "noop_max, fire_reset"),
                             ({"sticky": 0.25}, "env.options.sticky must be true, false or null (as the name says), got 0.25"),
                             ({"fire_reset": "yes"}, "env.options.fire_reset must be true or false, got 'yes'"),
                             ({"noop_max": -1}, "env.options.noop_max must be an integer >= 0, got -1"),
                             ({"noop_max": True}, "env.options.noop_max must be an integer >= 0, got True")):
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            make_batched_env("breakout", 1, library="atari", options=options)
    with pytest.raises(ConfigError, match="env suite 'gymnasium' takes no options, got sticky"):
        make_env("CartPole-v1", library="gymnasium", options={"sticky": True})
    with pytest.raises(ConfigError, match="env.options must be a mapping"):
        make_batched_env("breakout", 1, library="atari", options=["sticky"])


@pytest.mark.parametrize("noop_max", [0, 30])
def test_a_runs_env_options_reach_its_actor_workers_and_its_evaluation(make_cfg, monkeypatch, noop_max):
    """``env.options`` from the command line to the envs a run's actor workers build, the ones
    its evaluation plays and the ones ``actorq evaluate`` plays (the actor pool is replaced by
    one that keeps its spec)."""
    import actorq.actors.pool
    from actorq.actors.policy import actor_policy
    from actorq.quant import QuantSpec
    from actorq.run.build import build_learner
    from actorq.run.plan import make_plan
    from actorq.tools.agent import Agent
    from actorq.envs import EnvSpec
    from actorq.run.assemble import connect_experience

    cfg = make_cfg("+experiment=dqn_breakout", f"env.options.noop_max={noop_max}", "actors.envs_per_worker=3",
                   "actors.collection=async")
    learner = build_learner(cfg.algo, EnvSpec.from_env(make_env("breakout", options=cfg.env.options)), "breakout")
    policy = actor_policy(learner, QuantSpec(bits=32), torch.zeros(1, 4, 84, 84, dtype=torch.uint8))
    experience = connect_experience(cfg, make_plan(cfg, learner), learner, policy)
    monkeypatch.setattr(actorq.actors.pool, "ActorPool", lambda spec, policy, writer=None: spec)
    worker = experience._start_actors()
    assert same_game_in_every_env(worker.worker_env()()) == (noop_max == 0)
    assert same_game_in_every_env(experience.make_eval_env(3, seed=0)) == (noop_max == 0)
    agent = Agent(cfg, learner, learner.behaviour_network, "learner", "fp32", checkpoint=None)
    assert same_game_in_every_env(agent.make_eval_env(3, seed=0)) == (noop_max == 0)


def test_env_options_sticky_null_takes_the_names_sticky_actions_and_true_or_false_overrides_it(monkeypatch):
    from actorq.envs import atari

    made = []
    monkeypatch.setattr(atari, "AtariEnvs", lambda game, n, evaluation=False, **options: made.append(
        (game, options["sticky"])))
    suite = AtariSuite()
    for name, sticky in (("ALE/Pong-v5", None), ("ALE/Pong-v5", False), ("pong", None), ("pong", True)):
        suite.make_raw(name, 1, sticky=sticky)
    assert made == [("pong", True), ("pong", False), ("pong", False), ("pong", True)]
