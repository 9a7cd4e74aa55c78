import pytest
import torch

from actorq.actors.policy import ExplorationPolicy
from actorq.envs import EnvSpec
from actorq.algos.networks import Critic, DeterministicActor, QNetwork

CONTINUOUS = EnvSpec(obs_dim=5, discrete=False, action_dim=2, action_low=(-1.0, 0.0), action_high=(1.0, 4.0))
DISCRETE = EnvSpec(obs_dim=4, discrete=True, num_actions=3)


def test_shapes_come_from_the_spec():
    assert DeterministicActor(CONTINUOUS, (16,))(torch.zeros(7, 5)).shape == (7, 2)
    assert QNetwork(DISCRETE, (16, 16))(torch.zeros(7, 4)).shape == (7, 3)
    assert Critic(CONTINUOUS, (16,))(torch.zeros(7, 5), torch.zeros(7, 2)).shape == (7,)
    assert Critic(CONTINUOUS, (16,), layer_norm=True, out_dim=51)(torch.zeros(7, 5), torch.zeros(7, 2)).shape == (7, 51)


def test_actor_respects_bounds():
    actor = DeterministicActor(CONTINUOUS, (16,))
    with torch.no_grad():
        actor.trunk[-1].bias.copy_(torch.tensor([100.0, -100.0]))
    out = actor(torch.zeros(1, 5))
    assert out[0].tolist() == pytest.approx([1.0, 0.0], abs=1e-5)


def test_wrong_action_space_is_rejected():
    with pytest.raises(ValueError, match="discrete"):
        QNetwork(CONTINUOUS, (8,))
    with pytest.raises(ValueError, match="continuous"):
        DeterministicActor(DISCRETE, (8,))


def test_epsilon_greedy():
    net = QNetwork(DISCRETE, (8,))
    with torch.no_grad():
        net.trunk[-1].bias.copy_(torch.tensor([0.0, 50.0, 0.0]))
    obs = torch.zeros(2000, 4)
    assert (ExplorationPolicy(net, DISCRETE, 0.0)(obs) == 1).all()
    random_share = (ExplorationPolicy(net, DISCRETE, 0.3)(obs) != 1).float().mean()
    assert 0.15 < random_share < 0.25  # 0.3 * 2/3 of random picks are not the greedy one


def test_gaussian_noise_is_clipped_to_bounds():
    policy = ExplorationPolicy(DeterministicActor(CONTINUOUS, (8,)), CONTINUOUS, 5.0)
    actions = policy(torch.zeros(1000, 5))
    assert actions.std(0).min() > 0.3
    assert (actions[:, 0].abs() <= 1).all() and (actions[:, 1] >= 0).all() and (actions[:, 1] <= 4).all()


def test_unbatched_observation():
    policy = ExplorationPolicy(QNetwork(DISCRETE, (8,)), DISCRETE, 0.1)
    assert policy(torch.zeros(4)).shape == ()


def test_gaussian_sigma_is_the_noise_scale_times_the_half_range():
    actor = DeterministicActor(CONTINUOUS, (8,))
    with torch.no_grad():  # the actor then outputs the centre of the bounds, (0, 2)
        actor.trunk[-1].weight.zero_()
        actor.trunk[-1].bias.zero_()
    torch.manual_seed(0)
    actions = ExplorationPolicy(actor, CONTINUOUS, 0.1)(torch.randn(20000, 5))
    half_range = (torch.tensor(CONTINUOUS.action_high) - torch.tensor(CONTINUOUS.action_low)) / 2
    assert actions.mean(0).tolist() == pytest.approx([0.0, 2.0], abs=0.01)
    assert actions.std(0).tolist() == pytest.approx((0.1 * half_range).tolist(), rel=0.03)


def test_greedy_actions_keep_every_leading_dimension():
    net = QNetwork(DISCRETE, (8,))
    policy = ExplorationPolicy(net, DISCRETE, 0.0)
    observations = torch.randn(2, 5, 4)  # e.g. [workers, envs, obs_dim]
    with torch.no_grad():
        q_values = net(observations.reshape(10, 4))
    expected = torch.tensor([max(range(3), key=row.__getitem__) for row in q_values.tolist()])
    assert torch.equal(policy(observations), expected.reshape(2, 5))
    assert policy(observations[0, :1]).shape == (1,)  # a batch of one stays a batch


def test_policy_state_holds_the_weights_the_scale_the_version_and_the_bounds_only():
    actor = DeterministicActor(CONTINUOUS, (8,))
    state = ExplorationPolicy(actor, CONTINUOUS, 0.1).state_dict()
    network_keys = {f"network.{key}" for key in actor.state_dict()}
    assert set(state) == network_keys | {"noise_scale", "policy_version", "low", "high"}  # half_range is derived


def test_one_envs_frame_stack_is_an_unbatched_observation_as_one_vector_is():
    """An actor worker with one env (``envs_per_worker=1``) hands its policy one observation:
    a vector ``[obs_dim]``, or a stack of frames ``[C, H, W]``; the action comes back unbatched."""
    from actorq.algos.conv import PixelQNetwork

    frames = EnvSpec(obs_dim=4 * 84 * 84, discrete=True, num_actions=4, frame_shape=(4, 84, 84))
    policy = ExplorationPolicy(PixelQNetwork("nature", (4, 84, 84), 4), frames, 0.0, records=("policy_version",))
    stack = torch.randint(0, 256, (4, 84, 84), dtype=torch.uint8)
    action, version = policy(stack)
    assert action.shape == version.shape == ()
    assert int(action) == int(policy(stack.unsqueeze(0))[0][0])  # greedy: the batched answer
    assert ExplorationPolicy(QNetwork(DISCRETE, (8,)), DISCRETE, 0.0)(torch.zeros(DISCRETE.obs_dim)).shape == ()
