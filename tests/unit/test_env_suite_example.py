"""The worked example of docs/configuration.md: a suite of one's own, in a module outside
actorq, imported the way ``env.module`` imports it."""

import sys

import pytest
import torch

from actorq.envs import EnvSpec, import_suites, make_env, random_observations, suites, unregister_suite
from actorq.envs import make_batched_env
from actorq.envs.batched import LeanBatchedEnv
from tests.helpers import example

MODULE = "corridor_suite"


@pytest.fixture
def corridor_suite(tmp_path, monkeypatch):
    """The page's ``corridor_suite.py`` in a folder on the Python path, imported; afterwards the
    registry and ``sys.modules`` are as they were."""
    (tmp_path / f"{MODULE}.py").write_text(example("corridor-suite", "configuration.md"))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert import_suites(MODULE) == (MODULE,)
        yield sys.modules[MODULE]
    finally:
        sys.modules.pop(MODULE, None)
        if "corridor" in suites():
            unregister_suite("corridor")


def test_importing_the_module_registers_its_suite(corridor_suite):
    env = make_env("corridor-5", seed=0, library="corridor")
    assert EnvSpec.from_env(env) == EnvSpec(obs_dim=1, discrete=True, num_actions=2)
    steps = env.rollout(8, break_when_any_done=False)
    assert steps["next", "observation"].shape == (8, 1)
    assert random_observations(env, 6).shape == (6, 1)


def test_actors_evaluation_and_make_env_step_the_one_raw_env(corridor_suite):
    single = make_env("corridor-5", seed=3, library="corridor")
    batch = make_batched_env("corridor-5", 2, seed=3, library="corridor")
    assert isinstance(single, LeanBatchedEnv) and not single.batched
    assert isinstance(batch.raw.envs[0], corridor_suite.Corridor) and batch.batch_size == (2,)
    right = torch.ones(4, dtype=torch.int64)
    single_steps = single.rollout(4, policy=lambda td: td.set("action", right[0]))
    batch_steps = batch.rollout(4, policy=lambda td: td.set("action", right[:2]))
    assert torch.equal(single_steps["next", "observation"], batch_steps["next", "observation"][0])
    assert single_steps["next", "observation"][-1].item() == pytest.approx(0.8)  # 4 cells right of 5


def test_without_a_library_the_suite_is_found_by_name(corridor_suite):
    assert EnvSpec.from_env(make_env("corridor-20")).obs_dim == 1


def test_the_corridor_pays_at_its_end_and_cuts_episodes_short(corridor_suite):
    corridor = corridor_suite.Corridor(2)
    corridor.reset(seed=0)
    assert corridor.step(1)[1:4] == (0.0, False, False)
    assert corridor.step(1)[1:4] == (1.0, True, False)
    corridor.reset(seed=0)
    ends = [corridor.step(0)[3] for _ in range(8)]
    assert ends == [False] * 7 + [True]


def test_the_example_leaves_the_registry_as_it_found_it():
    assert "corridor" not in suites() and MODULE not in sys.modules
