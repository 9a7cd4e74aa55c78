"""``Agent.predict``, Stable-Baselines3's call with its default: greedy when deterministic; a
stochastic policy samples otherwise (the default); a policy without a distribution stays greedy."""

from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from actorq.algos.base import Exploration
from actorq.algos.dqn import DQN
from actorq.algos.ppo import PPO
from actorq.tools.agent import Agent
from tests.helpers import DISCRETE


def agent_of(learner) -> Agent:
    return Agent(OmegaConf.create({"env": {"name": "CartPole-v1"}}), learner, learner.behaviour_network,
                 "learner", "fp32", Path("last.ckpt"))


def test_predict_is_act_when_deterministic_and_samples_a_stochastic_policy_otherwise_by_default():
    torch.manual_seed(0)
    agent = agent_of(PPO(DISCRETE, hidden=(8,)))
    observations = torch.randn(256, DISCRETE.obs_dim)
    action, state = agent.predict(observations, deterministic=True)
    assert state is None and torch.equal(action, agent.act(observations))
    sampled, _ = agent.predict(observations)  # SB3's default: deterministic=False
    assert sampled.shape == (256,) and not torch.equal(sampled, action)  # a near-uniform policy's samples vary
    one, _ = agent.predict(np.zeros(DISCRETE.obs_dim), deterministic=False)
    assert isinstance(one, np.ndarray) and one.shape == () and int(one) in range(DISCRETE.num_actions)


def test_a_q_network_predicts_its_greedy_action_either_way():
    agent = agent_of(DQN(DISCRETE, Exploration(0.5), hidden=(8,)))
    observations = torch.randn(64, DISCRETE.obs_dim)
    assert torch.equal(agent.predict(observations, deterministic=False)[0], agent.act(observations))
