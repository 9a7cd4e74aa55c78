"""The frame replay stores each frame once and stacks on sampling: every transition it gives
back holds exactly the stacked observations the env showed, across episode starts, episode
ends (terminated by a lost life) and the ring's wrap, and across batches that do not go on
from what a ring holds (a dropped batch, a restarted worker, two workers' rows in one ring)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from actorq.data.replay.factory import FRAME_SLOT_SCALARS
from actorq.data.replay.frames import FrameReplay
from actorq.envs.atari import make_atari

ENVS, STEPS, BATCHES = 2, 40, 3


def breakout_batches() -> list[TensorDict]:
    """Collector batches ``[ENVS, STEPS]`` of Breakout under random actions, each row one
    single-env emulator (an episode's end: the step's next observation is the final one, and
    the next step starts from the reset)."""
    envs = [make_atari("breakout", num_envs=1, seed=seed) for seed in range(ENVS)]
    rng = np.random.default_rng(0)
    observation = [env.reset(seed=seed)[0][0] for seed, env in enumerate(envs)]
    batches = []
    for _ in range(BATCHES):
        rows = []
        for i, env in enumerate(envs):
            row = {"observation": [], "action": [], "next_observation": [], "reward": [], "terminated": [], "done": []}
            for _ in range(STEPS):
                action = int(rng.integers(0, 4))
                frames, reward, terminated, truncated, _ = env.step(np.array([action]))
                row["observation"].append(observation[i])
                row["action"].append(action)
                row["next_observation"].append(frames[0])
                row["reward"].append(float(reward[0]))
                row["terminated"].append(bool(terminated[0]))
                row["done"].append(bool(terminated[0] or truncated[0]))
                observation[i] = env.step(np.array([0]))[0][0] if row["done"][-1] else frames[0]  # ale-py resets then
            rows.append(row)
        stacked = {key: np.stack([np.array(row[key]) for row in rows]) for key in rows[0]}
        flag = {key: torch.from_numpy(stacked[key]).unsqueeze(-1) for key in ("reward", "terminated", "done")}
        batches.append(TensorDict({"observation": torch.from_numpy(stacked["observation"]),
                                   "action": torch.from_numpy(stacked["action"]),
                                   "next": {"observation": torch.from_numpy(stacked["next_observation"]),
                                            "reward": flag["reward"].float(), "terminated": flag["terminated"],
                                            "done": flag["done"]}}, batch_size=[ENVS, STEPS]))
    for env in envs:
        env.close()
    return batches


@pytest.fixture(scope="module")
def batches() -> list[TensorDict]:
    return breakout_batches()


def recorded(batches: list[TensorDict]) -> dict[tuple[int, int], TensorDict]:
    """(env, step number over all batches) -> the step as the env showed it."""
    return {(env, b * STEPS + t): batch[env, t] for b, batch in enumerate(batches)
            for env in range(ENVS) for t in range(STEPS)}


def test_every_stored_transition_is_the_stacked_observation_the_env_showed(batches):
    ends = sum(int(batch["next", "done"].sum()) for batch in batches)
    assert ends >= 2  # lives were lost: the check crosses episode ends and starts
    replay = FrameReplay(capacity=ENVS * 1000, envs=ENVS)
    for batch in batches:
        replay.extend(batch)
    steps = recorded(batches)
    for env, starts in enumerate(replay.starts()):
        assert len(starts) == BATCHES * STEPS - 1  # every step but the last, which waits for its next frame
        got = replay.transitions(np.full(len(starts), env), starts)
        for i in range(len(starts)):
            step = steps[(env, i)]
            assert torch.equal(got["observation"][i], step["observation"]), (env, i)
            assert torch.equal(got["next_observation"][i], step["next", "observation"]), (env, i)
            assert int(got["action"][i]) == int(step["action"])
            assert bool(got["done"][i]) == bool(step["next", "done"]) and bool(got["terminated"][i]) == bool(
                step["next", "terminated"])
            assert float(got["reward"][i]) == float(step["next", "reward"])


def test_the_ring_forgets_the_oldest_steps_and_never_samples_a_stack_it_overwrote(batches):
    replay = FrameReplay(capacity=ENVS * 50, envs=ENVS)  # 50 slots per env: 120 steps wrap it
    for batch in batches:
        replay.extend(batch)
    steps = recorded(batches)
    for env, starts in enumerate(replay.starts()):
        assert len(starts) <= 50 - 3
        got = replay.transitions(np.full(len(starts), env), starts)
        # absolute slots count final frames too: match each by its action, reward and frames
        newest = {(env, n): step for (e, n), step in steps.items() if e == env and n >= BATCHES * STEPS - 50}
        for i in range(len(starts)):
            assert any(torch.equal(got["observation"][i], step["observation"])
                       and torch.equal(got["next_observation"][i], step["next", "observation"])
                       for step in newest.values()), (env, i)
    sample = replay.sample(64, generator=np.random.default_rng(0)).batch
    assert sample["observation"].shape == (64, 4, 84, 84) and sample["observation"].dtype == torch.uint8
    assert len(replay) == sum(len(starts) for starts in replay.starts())


def test_draws_are_uniform_over_the_transitions_and_never_start_at_a_final_frame():
    replay = FrameReplay(capacity=2 * 40, envs=2, frame_shape=(1,))
    done = torch.zeros(2, 30, 1, dtype=torch.bool)
    done[0, 4::5] = True  # env 0: an episode every 5 steps, so many final frames; env 1: none
    batch = TensorDict({"observation": torch.zeros(2, 30, 4, 1, dtype=torch.uint8),
                        "action": torch.zeros(2, 30, dtype=torch.int64),
                        "next": {"observation": torch.zeros(2, 30, 4, 1, dtype=torch.uint8),
                                 "reward": torch.zeros(2, 30, 1), "terminated": done, "done": done}},
                       batch_size=[2, 30])
    replay.extend(batch)
    replay.extend(batch)  # wraps both rings
    starts = {(env, int(slot)) for env, slots in enumerate(replay.starts()) for slot in slots}
    assert len(replay) == len(starts)
    env, slot = replay.draw(200_000, np.random.default_rng(0))
    drawn = collections.Counter(zip(env.tolist(), slot.tolist()))
    assert set(drawn) == starts  # every transition, and nothing else (no final frame, no overwritten stack)
    expected = 200_000 / len(starts)
    assert all(abs(count - expected) < 5 * expected ** 0.5 for count in drawn.values())


def test_a_million_atari_transitions_fit_in_8_gb_and_bad_input_is_refused():
    # A slot is one 84x84 frame plus its scalars, as the replay's factory sizes it for its memory check.
    small = FrameReplay(capacity=1000, envs=2)
    assert small.nbytes == 1000 * (84 * 84 + FRAME_SLOT_SCALARS)
    assert small.nbytes * 1000 < 8e9  # a million slots
    with pytest.raises(ValueError, match="at least 6 slots per env"):
        FrameReplay(capacity=10, envs=2)
    with pytest.raises(ValueError, match=r"expected a batch \[envs <= 2, T\]"):
        small.extend(TensorDict({}, batch_size=[3, 4]))
    with pytest.raises(ValueError, match="no complete transition"):
        small.sample(1)


class Game:
    """A made-up game whose frames are all distinct but the first ``still`` (one screen), none
    all zeros, and whose episodes end at the steps asked: each step's observation is its
    episode's last 4 frames, zeros before the episode's first, as ale-py shows them."""

    def __init__(self, first_frame: int, ends: tuple[int, ...] = (), still: int = 0):
        self.count, self.ends, self.t = first_frame, set(ends), 0
        self.made, self.still = 0, still
        self.episode = [self._frame()]

    def _frame(self) -> np.ndarray:
        self.made += 1
        self.count += self.made == 1 or self.made > self.still
        return np.array([self.count % 256, self.count // 256], dtype=np.uint8)

    def _observation(self) -> np.ndarray:
        stack = np.zeros((4, 2), dtype=np.uint8)
        recent = self.episode[-4:]
        stack[4 - len(recent):] = recent
        return stack

    def step(self) -> dict:
        observation = self._observation()
        self.episode.append(self._frame())
        step = {"observation": observation, "next_observation": self._observation(), "action": self.t % 3,
                "reward": float(self.t), "done": self.t in self.ends}
        self.t += 1
        if step["done"]:
            self.episode = [self._frame()]
        return step


def game_batch(games: list[Game], steps: int, workers: list[int] | None = None) -> tuple[TensorDict, list]:
    """A collector batch ``[len(games), steps]`` (row ``i`` game ``i``'s next steps; a
    ``"worker"`` record when ``workers`` names each row's) and its steps, row by row."""
    rows = [[game.step() for _ in range(steps)] for game in games]

    def field(key, dtype):
        return torch.tensor(np.array([[step[key] for step in row] for row in rows]), dtype=dtype)

    done = field("done", torch.bool).unsqueeze(-1)
    batch = TensorDict({"observation": field("observation", torch.uint8), "action": field("action", torch.int64),
                        "next": {"observation": field("next_observation", torch.uint8),
                                 "reward": field("reward", torch.float32).unsqueeze(-1),
                                 "terminated": done, "done": done}}, batch_size=[len(games), steps])
    if workers is not None:
        batch["worker"] = torch.tensor(workers).unsqueeze(-1).expand(len(games), steps)
    return batch, rows


def assert_transitions_are(replay: FrameReplay, env: int, expected: list[dict]) -> None:
    """Env ``env``'s ring holds exactly the transitions ``expected``, in order."""
    starts = replay.starts()[env]
    assert len(starts) == len(expected)
    got = replay.transitions(np.full(len(starts), env), starts)
    for i, step in enumerate(expected):
        assert np.array_equal(got["observation"][i].numpy(), step["observation"]), i
        assert np.array_equal(got["next_observation"][i].numpy(), step["next_observation"]), i
        assert (int(got["action"][i]), float(got["reward"][i])) == (step["action"], step["reward"]), i
        assert bool(got["done"][i]) == bool(got["terminated"][i]) == step["done"], i
        assert float(got["discount"][i]) == pytest.approx(0.0 if step["done"] else 0.99), i


def test_a_dropped_batch_ends_the_stream_before_it_and_starts_one_at_the_next_batch_observation():
    game = Game(first_frame=0, ends=(13,))  # batches of 5 steps: the episode after 13 starts in the dropped one
    replay = FrameReplay(capacity=100, envs=1, frame_shape=(2,))
    (first, steps0), (second, steps1), _dropped, (fourth, steps3) = (game_batch([game], 5) for _ in range(4))
    for batch in (first, second, fourth):
        replay.extend(batch)
    assert fourth["observation"][0, 0, :2].eq(0).all()  # its first step is the episode's second: zeros before
    # Every step stored; the second batch's last step ends with the next observation it saw, not
    # the fourth batch's first, and is no end of an episode; only the very last step waits.
    assert_transitions_are(replay, 0, steps0[0] + steps1[0] + steps3[0][:-1])
    assert replay.stream_breaks == 1
    assert len(replay) == 14


def test_a_dropped_batch_on_a_still_screen_is_told_by_the_frame_it_missed():
    game = Game(first_frame=0, still=6)  # frames 0-5 one screen; it changes in the dropped batch
    replay = FrameReplay(capacity=100, envs=1, frame_shape=(2,))
    (first, steps0), _dropped, (third, steps2) = (game_batch([game], 3) for _ in range(3))
    replay.extend(first)
    replay.extend(third)
    assert np.array_equal(third["observation"][0, 0, :3], first["next", "observation"][0, -1, :3])  # older: alike
    assert_transitions_are(replay, 0, steps0[0] + steps2[0][:-1])
    assert replay.stream_breaks == 1


def test_a_restarted_worker_starts_a_new_stream_in_its_envs_rings():
    replay = FrameReplay(capacity=2 * 60, envs=2, frame_shape=(2,))
    old = [Game(first_frame=0, ends=(3,)), Game(first_frame=1000)]
    first, before = game_batch(old, 6, workers=[1, 1])
    replay.extend(first)
    new = [Game(first_frame=2000), Game(first_frame=3000)]  # the restarted worker's envs, from their reset
    second, after = game_batch(new, 6, workers=[1, 1])
    replay.extend(second)
    for env in range(2):
        assert_transitions_are(replay, env, before[env] + after[env][:-1])
    assert replay.stream_breaks == 2
    assert len(replay._rings) == 2  # the same worker's envs: the same rings


def test_rows_of_two_workers_that_share_a_ring_still_give_back_the_transitions_they_recorded():
    """Batches without a ``"worker"`` record name no worker: two workers' rows land in the same
    ring, which then holds two streams, starting a new one at each batch; nothing mixes them,
    through the ring's wrap too."""
    replay = FrameReplay(capacity=2 * 30, envs=2, frame_shape=(2,))
    games = [[Game(first_frame=0, ends=(7,)), Game(first_frame=1000)], [Game(first_frame=2000),
                                                                       Game(first_frame=3000, ends=(2, 9))]]
    by_observation = {}  # frames are distinct: an observation names its step
    for _ in range(6):
        for worker in (0, 1):
            batch, rows = game_batch(games[worker], 4)
            replay.extend(batch)
            by_observation.update({step["observation"].tobytes(): step for row in rows for step in row})
    starts = replay.starts()
    assert len(replay) == sum(len(slots) for slots in starts) > 20
    for env, slots in enumerate(starts):
        got = replay.transitions(np.full(len(slots), env), slots)
        for i in range(len(slots)):
            step = by_observation[got["observation"][i].numpy().tobytes()]
            assert np.array_equal(got["next_observation"][i].numpy(), step["next_observation"]), (env, i)
            assert int(got["action"][i]) == step["action"] and bool(got["done"][i]) == step["done"]
    env, slot = replay.draw(2000, np.random.default_rng(0))
    assert set(zip(env.tolist(), slot.tolist())) == {(e, int(s)) for e, slots in enumerate(starts) for s in slots}
    assert replay.stream_breaks == 2 * 11  # at each batch but the first in a ring


def test_a_worker_of_one_env_hands_over_batches_of_its_steps_alone():
    replay = FrameReplay(capacity=40, envs=1, frame_shape=(2,))
    game, steps = Game(first_frame=0, ends=(4,)), []
    for _ in range(2):
        batch, rows = game_batch([game], 5, workers=[0])
        replay.extend(batch[0])  # [T]: a lean env of one env has no env dimension
        steps += rows[0]
    assert_transitions_are(replay, 0, steps[:-1])


def test_observations_for_calibration_are_drawn_without_replacement():
    """Each env's frames numbered apart (env 0: 1-40, env 1: 101-140), so a stack's newest frame
    names its transition: a draw never repeats one, and asking for more than the replay holds
    gives each stored one once (the push cuts its calibration and held-out sets from one draw)."""
    frames = torch.stack([torch.arange(1, 42), torch.arange(101, 142)]).to(torch.uint8)  # [envs, steps + 1]

    def stacks(t):  # what the env shows at step t: the last 4 frames, zeros before the first
        out = torch.zeros(2, 4, 1, dtype=torch.uint8)
        for k in range(4):
            if t - 3 + k >= 0:
                out[:, k, 0] = frames[:, t - 3 + k]
        return out

    no = torch.zeros(2, 40, 1, dtype=torch.bool)
    replay = FrameReplay(capacity=2 * 64, envs=2, frame_shape=(1,))
    replay.extend(TensorDict({"observation": torch.stack([stacks(t) for t in range(40)], 1),
                              "action": torch.zeros(2, 40, dtype=torch.int64),
                              "next": {"observation": torch.stack([stacks(t + 1) for t in range(40)], 1),
                                       "reward": torch.zeros(2, 40, 1), "terminated": no, "done": no}},
                             batch_size=[2, 40]))
    assert len(replay) == 78  # each env's last step waits for its next frame
    for count in (30, 60, 78):
        newest = replay.observations(count)[:, -1, 0].tolist()
        assert len(newest) == len(set(newest)) == count
    assert sorted(replay.observations(500)[:, -1, 0].tolist()) == [*range(1, 40), *range(101, 140)]
