"""The frame replay stores each frame once and stacks on sampling: every transition it gives
back holds exactly the stacked observations the env showed, across episode starts, episode
ends (terminated by a lost life) and the ring's wrap."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from tensordict import TensorDict

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
    # Sized without allocating: one 84x84 frame per slot, plus 26 bytes of scalars per slot.
    frame, scalars = 84 * 84, 8 + 8 + 4 + 1 + 1
    assert 1_000_000 * (frame + scalars) < 8e9
    small = FrameReplay(capacity=1000, envs=2)
    assert small.nbytes == 2 * 500 * (frame + scalars)
    with pytest.raises(ValueError, match="at least 6 slots per env"):
        FrameReplay(capacity=10, envs=2)
    with pytest.raises(ValueError, match=r"expected a batch \[envs <= 2, T\]"):
        small.extend(TensorDict({}, batch_size=[3, 4]))
    with pytest.raises(ValueError, match="no complete transition"):
        small.sample(1)
