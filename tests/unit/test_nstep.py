import pytest
import torch
from tensordict import TensorDict

from actorq.data.nstep import nstep_transitions


def trajectory(rewards, terminated=None, done=None):
    steps = len(rewards)
    terminated = terminated or [False] * steps
    done = done or terminated
    return TensorDict(
        {
            "observation": torch.arange(steps, dtype=torch.float32).unsqueeze(-1),
            "action": torch.zeros(steps, 1),
            "next": {
                "observation": torch.arange(1, steps + 1, dtype=torch.float32).unsqueeze(-1),
                "reward": torch.tensor(rewards, dtype=torch.float32).unsqueeze(-1),
                "terminated": torch.tensor(terminated).unsqueeze(-1),
                "done": torch.tensor(done).unsqueeze(-1),
            },
        },
        batch_size=[steps],
    )


def test_one_step_is_the_plain_transition():
    out = nstep_transitions(trajectory([1.0, 2.0, 3.0], terminated=[False, False, True]), 1, 0.9)
    assert out["reward"].tolist() == [1.0, 2.0, 3.0]
    assert out["discount"].tolist() == pytest.approx([0.9, 0.9, 0.0])
    assert out["next_observation"].squeeze(-1).tolist() == [1.0, 2.0, 3.0]


def test_three_step_sums_rewards_and_stops_at_episode_end():
    batch = trajectory([1.0, 1.0, 1.0, 1.0, 1.0], terminated=[False, True, False, False, False])
    out = nstep_transitions(batch, 3, 0.5)
    # t=0 stops after step 1 (terminated), t=2 sums 3 rewards, t=4 runs out of batch.
    assert out["reward"].tolist() == pytest.approx([1.5, 1.0, 1.75, 1.5, 1.0])
    assert out["discount"].tolist() == pytest.approx([0.0, 0.0, 0.125, 0.25, 0.5])
    assert out["next_observation"].squeeze(-1).tolist() == [2.0, 2.0, 5.0, 5.0, 5.0]


def test_truncation_bootstraps_but_termination_does_not():
    batch = trajectory([1.0, 1.0, 1.0], terminated=[False, False, False], done=[True, False, False])
    out = nstep_transitions(batch, 2, 0.5)
    assert out["reward"][0] == 1.0 and out["discount"][0] == pytest.approx(0.5)
    assert out["next_observation"][0].item() == 1.0


def test_batched_envs_are_flattened_in_order():
    a, b = trajectory([1.0, 2.0]), trajectory([3.0, 4.0])
    out = nstep_transitions(torch.stack([a, b]), 1, 0.9)
    assert out.batch_size == torch.Size([4])
    assert out["reward"].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_rejects_n_below_one():
    with pytest.raises(ValueError, match="n-step"):
        nstep_transitions(trajectory([1.0]), 0, 0.9)


def brute_force_nstep(reward, terminated, done, n, gamma):
    """One trajectory's n-step (reward, discount, index of the last step), step by step."""
    steps = len(reward)
    out = []
    for start in range(steps):
        total, last = 0.0, start
        for k in range(n):
            last = start + k
            total += gamma**k * reward[last]
            if done[last] or last == steps - 1:
                break
        count = last - start + 1
        out.append((total, 0.0 if terminated[last] else gamma**count, last))
    return out


def test_every_field_of_a_multi_env_batch_matches_a_step_by_step_reference():
    generator = torch.Generator().manual_seed(0)
    envs, steps, obs_dim, action_dim, n, gamma = (2, 3), 5, 2, 3, 3, 0.9
    reward = torch.randn(*envs, steps, 1, generator=generator)
    done = torch.rand(*envs, steps, 1, generator=generator) < 0.3
    terminated = done & (torch.rand(*envs, steps, 1, generator=generator) < 0.5)
    observation = torch.randn(*envs, steps, obs_dim, generator=generator)
    next_observation = torch.randn(*envs, steps, obs_dim, generator=generator)
    action = torch.randn(*envs, steps, action_dim, generator=generator)
    batch = TensorDict(
        {"observation": observation, "action": action,
         "next": {"observation": next_observation, "reward": reward, "terminated": terminated, "done": done}},
        batch_size=[*envs, steps],
    )
    out = nstep_transitions(batch, n, gamma)

    trajectories = envs[0] * envs[1]
    rows = [(e, t) for e in range(trajectories) for t in range(steps)]
    flat = {name: value.reshape(trajectories, steps, -1) for name, value in
            [("observation", observation), ("action", action), ("next_observation", next_observation)]}
    expected = [brute_force_nstep(r.tolist(), te.tolist(), d.tolist(), n, gamma) for r, te, d in
                zip(reward.reshape(trajectories, steps), terminated.reshape(trajectories, steps),
                    done.reshape(trajectories, steps), strict=True)]
    assert out.batch_size == torch.Size([len(rows)])
    assert out["reward"].tolist() == pytest.approx([expected[e][t][0] for e, t in rows], abs=1e-5)
    assert out["discount"].tolist() == pytest.approx([expected[e][t][1] for e, t in rows], abs=1e-6)
    assert torch.equal(out["observation"], torch.stack([flat["observation"][e, t] for e, t in rows]))
    assert torch.equal(out["action"], torch.stack([flat["action"][e, t] for e, t in rows]))
    assert torch.equal(out["next_observation"],
                       torch.stack([flat["next_observation"][e, expected[e][t][2]] for e, t in rows]))
    assert terminated.any() and (done & ~terminated).any()  # the batch holds both episode ends
