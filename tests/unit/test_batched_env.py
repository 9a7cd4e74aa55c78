"""The lean batched env steps exactly like the single TorchRL envs of ``make_env`` it replaces."""

from __future__ import annotations

import pytest
import torch
from torchrl._utils import seed_generator
from torchrl.envs.utils import check_env_specs

from actorq.envs import make_env, rollout_return
from actorq.envs import make_batched_env
from actorq.envs.batched import LeanBatchedEnv

KEYS = ["observation", "episode_reward", ("next", "observation"), ("next", "reward"),
        ("next", "episode_reward"), ("next", "done"), ("next", "terminated"), ("next", "truncated")]
TOL = 1e-5


def _seed_chain(seed: int, n: int) -> list[int]:
    seeds = [seed]
    for _ in range(n - 1):
        seeds.append(seed_generator(seeds[-1]))
    return seeds


def _compare(name: str, num_envs: int | None, steps: int, seed: int = 7) -> dict[str, int]:
    """Steps the lean env and ``num_envs`` single envs with the same random actions."""
    n = num_envs or 1
    lean = make_batched_env(name, num_envs, seed=seed)
    singles = [make_env(name, seed=s) for s in _seed_chain(seed, n)]
    lean_td, single_tds = lean.reset(), [env.reset() for env in singles]
    assert torch.equal(lean_td["observation"].reshape(n, -1),
                       torch.stack([td["observation"] for td in single_tds]))
    generator = torch.Generator().manual_seed(0)
    spec = lean.full_action_spec["action"]
    counts = {"done": 0, "terminated": 0, "truncated": 0}
    for t in range(steps):
        torch.manual_seed(int(torch.randint(1 << 30, (), generator=generator)))
        action = spec.rand()
        lean_td["action"] = action
        lean_step, lean_td = lean.step_and_maybe_reset(lean_td)
        rows = action.reshape(n, *action.shape[len(lean.batch_size):])
        for i, env in enumerate(singles):
            single_tds[i]["action"] = rows[i]
            single_step, single_tds[i] = env.step_and_maybe_reset(single_tds[i])
            for key in KEYS:
                ours = lean_step[key].reshape(n, *single_step[key].shape)[i]
                theirs = single_step[key]
                assert ours.dtype == theirs.dtype, (key, ours.dtype, theirs.dtype)
                assert torch.allclose(ours.float(), theirs.float(), atol=TOL, rtol=0), (name, t, i, key, ours, theirs)
            after = lean_td["observation"].reshape(n, -1)[i]
            assert torch.allclose(after, single_tds[i]["observation"], atol=TOL, rtol=0), (name, t, i, "reset obs")
            assert float(lean_td["episode_reward"].reshape(n)[i]) == pytest.approx(
                float(single_tds[i]["episode_reward"]), abs=TOL)
        for key in counts:
            counts[key] += int(lean_step["next", key].sum())
    assert set(map(str, lean_step.keys(True, True))) >= set(map(str, single_step.keys(True, True)))
    return counts


@pytest.mark.parametrize(("name", "num_envs", "steps"), [
    ("CartPole-v1", 4, 250),  # terminates: many episodes per env
    ("Pendulum-v1", 3, 420),  # truncated at 200 steps: two episodes per env
    ("Pendulum-v1", None, 420),  # unbatched (one env per worker)
])
def test_gymnasium_matches_single_envs(name, num_envs, steps):
    counts = _compare(name, num_envs, steps)
    if name == "CartPole-v1":
        assert counts["terminated"] >= 8 and counts["truncated"] == 0
    else:
        assert counts["truncated"] == 2 * (num_envs or 1) and counts["terminated"] == 0
    assert counts["done"] == counts["terminated"] + counts["truncated"]


@pytest.mark.timeout(300)
def test_dm_control_matches_single_envs():
    """cartpole-balance: 1000-step episodes end by the time limit (truncated, not terminated)."""
    counts = _compare("cartpole-balance", 2, 2010)
    assert counts == {"done": 4, "terminated": 0, "truncated": 4}


def test_partial_reset_restarts_only_the_masked_envs():
    env = make_batched_env("Pendulum-v1", 3, seed=1)
    td = env.reset()
    for _ in range(5):
        td["action"] = env.full_action_spec["action"].rand()
        _, td = env.step_and_maybe_reset(td)
    before_obs, before_return = td["observation"].clone(), td["episode_reward"].clone()
    mask = torch.tensor([[False], [True], [False]])
    after = env.reset(td.set("_reset", mask))
    keep = ~mask.squeeze(-1)
    assert torch.equal(after["observation"][keep], before_obs[keep])
    assert torch.equal(after["episode_reward"][keep], before_return[keep])
    assert not torch.equal(after["observation"][1], before_obs[1])
    assert float(after["episode_reward"][1]) == 0.0 and float(before_return[1]) != 0.0


@pytest.mark.parametrize("name", ["CartPole-v1", "cheetah-run"])
def test_specs_and_rollout(name):
    env = make_batched_env(name, 2, seed=0)
    assert isinstance(env, LeanBatchedEnv)
    check_env_specs(env)
    rollout = env.rollout(5, break_when_any_done=False)
    assert rollout.shape == (2, 5)
    assert rollout["observation"].dtype == torch.float32 and rollout["next", "reward"].dtype == torch.float32
    if name == "CartPole-v1":
        assert rollout["action"].dtype == torch.int64 and rollout["action"].shape == (2, 5)


def test_envs_of_one_worker_get_distinct_seeds():
    env = make_batched_env("cheetah-run", 3, seed=0)
    first = env.reset()["observation"]
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "cartpole-balance"])
def test_a_batch_plays_the_episodes_the_single_envs_play(name):
    """Evaluation's batched episodes: env ``i`` of a batch seeded ``s`` scores what one env
    seeded with the ``i``-th seed of the chain scores in its first episode, also when the
    episodes end at different steps (CartPole's, leaning towards the pole)."""
    lean = make_batched_env(name, 4, seed=3)

    def act(observation):
        if lean.full_action_spec["action"].domain == "discrete":
            return (observation[..., 2] > 0).long()
        return torch.tanh(observation[..., :1])

    batched = rollout_return(lean, act, 4)
    singles = [rollout_return(make_env(name, seed=s), act, 1)[0] for s in _seed_chain(3, 4)]
    assert batched == pytest.approx(singles, rel=1e-5)
    if name == "CartPole-v1":
        assert len(set(batched)) == 4, batched  # episodes of different lengths
    with pytest.raises(ValueError, match="5 episodes need batch_size \\[5\\], got \\[4\\]"):
        rollout_return(lean, act, 5)
