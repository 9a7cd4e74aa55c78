"""PPO (Schulman et al. 2017), with the decoupled objective that corrects for quantized actors.

The actors act with ``mu``: a copy of the learner's policy at the version they were pushed,
at the actors' precision (int8 with ``quant.bits=8``). The learner trains ``pi``. Between the
two stands the proximal policy ``pi_prox``: the fp32 policy whose copy the actors ran, which
in lock-step collection is the learner's own policy when the rollout arrives. The decoupled
PPO objective (Hilton et al. 2021, "Batch size-invariance for policy optimization") clips
``pi`` against ``pi_prox``, not against ``mu``, and weights each step by how much more
likely ``pi_prox`` makes its action than ``mu`` did, truncated at ``C``::

    w_t = min(pi_prox(a_t|s_t) / mu(a_t|s_t), C)
    r_t = pi(a_t|s_t) / pi_prox(a_t|s_t)
    L   = -mean_t[ w_t * min(r_t * A_t, clip(r_t, 1 - eps, 1 + eps) * A_t) ]

With fp32 actors in lock-step ``mu == pi_prox`` (up to float rounding): every ``w_t`` is 1 and
this is PPO's clipped surrogate. Values and advantages (GAE) are computed in fp32 by the
learner. What the correction did is logged with every rollout: ``KL(mu || pi_prox)``
estimated on the actors' own actions, the weights' mean and max and the fraction truncated,
the first epoch's clip fraction, and the policy lag (docs/algorithms/ppo.md).

Asynchronous PPO is the same learner with ``actors.collection=async``: the actors never wait
for it, each rollout arrives with the policy versions it was collected with, ``pi_prox`` is
the learner's policy when it arrives, V-trace (rho-bar = c-bar = 1) replaces GAE, and
rollouts more than ``max_policy_lag`` versions behind are dropped.

Example:
    >>> from actorq.envs import EnvSpec
    >>> ppo = PPO(EnvSpec(obs_dim=4, discrete=True, num_actions=2), hidden=(16,))
    >>> type(ppo.policy).__name__, ppo.records
    ('CategoricalPolicy', ('log_prob', 'policy_version', 'worker'))
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from torch import nn

from actorq.algos.base import adam, check_positive
from actorq.algos.conv import make_trunk
from actorq.algos.networks import (
    CategoricalHead,
    CategoricalPolicy,
    GaussianPolicy,
    ObservationNormalizer,
    StochasticPolicy,
    in_fp32,
    mlp,
    through_fp32_output,
)
from actorq.algos.on_policy import (
    OnPolicyLearner,
    RewardScaler,
    behaviour_correction,
    gae,
    rollout_fields,
    vtrace,
)
from actorq.envs import EnvSpec
from actorq.util.errors import ConfigError


VALUE_CHUNK = 64
"""Observations per forward pass when :meth:`PPO.prepare` computes a rollout's values."""


class PPO(OnPolicyLearner):
    """Proximal policy optimization for discrete (categorical) and continuous (Gaussian,
    state-independent log-std) actions, with separate policy and value networks, or for
    frames one convolutional trunk under a policy head and a value head.

    Args:
        spec: the environment spec.
        hidden: the policy's hidden widths.
        value_hidden: the value network's hidden widths (default: ``hidden``).
        lr: Adam's learning rate (annealed by ``final_lr_fraction``).
        adam_eps: Adam's epsilon (1e-5, as the PPO implementations do).
        epochs: passes over each rollout.
        minibatch_size: steps per gradient update (the last minibatch of an epoch may be smaller).
        clip_range: the surrogate's ``eps``.
        clip_range_final_fraction: ``clip_range`` falls linearly to this fraction of itself
            over the run (RL Zoo's ``lin_0.2``: 0.0; 1.0 keeps it).
        gae_lambda: GAE's lambda.
        value_coef: weight of the value loss.
        entropy_coef: weight of the entropy bonus.
        max_grad_norm: global gradient-norm clip over both networks (0: none).
        normalize_advantage: standardize advantages per minibatch.
        log_std_init: initial log standard deviation (continuous actions).
        orthogonal_init: orthogonal weights (gain sqrt(2); the policy's output 0.01, the
            value's 1) and zero biases, as in the PPO paper's implementation.
        normalize_observations: keep running observation statistics in the policy
            (:class:`~actorq.algos.networks.ObservationNormalizer`) and feed both networks
            normalized observations.
        scale_rewards: divide rewards by the running standard deviation of the discounted
            return (:class:`~actorq.algos.on_policy.RewardScaler`).
        importance_weight_cap: ``C``, where ``pi_prox / mu`` is truncated.
        pixel_trunk: for an env that shows frames, the convolutional trunk the policy and the
            value share (CleanRL's ``ppo_atari``): ``"nature"`` or ``"impala"``
            (:mod:`actorq.algos.conv`); ``hidden`` and ``value_hidden`` are then unused.
        micro_batch_size: rows per forward and backward pass within a minibatch (the same
            gradient, in parts: a large minibatch's activations leave the caches); ``None``:
            the whole minibatch at once; ``"auto"``: the faster of the whole minibatch, a half
            or a quarter of it, timed before the run (``actorq.run.learner_precision``).
        gamma, final_lr_fraction, max_policy_lag: see
            :class:`~actorq.algos.on_policy.OnPolicyLearner`.
    """

    action_space = "any"

    def __init__(
        self,
        spec: EnvSpec,
        hidden: Sequence[int] = (64, 64),
        value_hidden: Sequence[int] | None = None,
        lr: float = 3e-4,
        adam_eps: float = 1e-5,
        epochs: int = 10,
        minibatch_size: int = 64,
        clip_range: float = 0.2,
        clip_range_final_fraction: float = 1.0,
        gae_lambda: float = 0.95,
        value_coef: float = 0.5,
        entropy_coef: float = 0.0,
        max_grad_norm: float = 0.5,
        normalize_advantage: bool = True,
        log_std_init: float = 0.0,
        orthogonal_init: bool = True,
        normalize_observations: bool = False,
        scale_rewards: bool = False,
        importance_weight_cap: float = 1.0,
        pixel_trunk: str = "nature",
        micro_batch_size: int | str | None = None,
        **kwargs,
    ):
        super().__init__(spec, **kwargs)
        check_positive(lr=lr, adam_eps=adam_eps, clip_range=clip_range, importance_weight_cap=importance_weight_cap)
        if epochs < 1 or minibatch_size < 1:
            raise ValueError(f"epochs and minibatch_size must be >= 1, got {epochs} and {minibatch_size}")
        if micro_batch_size not in (None, "auto") and not (isinstance(micro_batch_size, int) and micro_batch_size >= 1):
            raise ValueError(f"micro_batch_size must be >= 1, auto or null, got {micro_batch_size!r}")
        if not 0 <= gae_lambda <= 1 or not 0 <= clip_range_final_fraction <= 1:
            raise ValueError("gae_lambda and clip_range_final_fraction must be in [0, 1], "
                             f"got {gae_lambda} and {clip_range_final_fraction}")
        self.shared_trunk = spec.pixels
        if spec.pixels:
            self.policy, self.value = pixel_actor_critic(spec, pixel_trunk, normalize_observations)
        else:
            self.policy = (CategoricalPolicy(spec, hidden, normalize_observations) if spec.discrete
                           else GaussianPolicy(spec, hidden, log_std_init, normalize_observations))
            self.value = mlp(spec.obs_dim, hidden if value_hidden is None else value_hidden, 1)
        if orthogonal_init:
            orthogonal_(self.policy.trunk, output_gain=0.01)
            orthogonal_(self.value, output_gain=1.0)
        self.reward_scaler = RewardScaler(self.gamma) if scale_rewards else None
        self.lr, self.adam_eps = lr, adam_eps
        self.epochs, self.minibatch_size = epochs, minibatch_size
        self.clip_range, self.clip_range_final_fraction = clip_range, clip_range_final_fraction
        self.gae_lambda, self.value_coef, self.entropy_coef = gae_lambda, value_coef, entropy_coef
        self.max_grad_norm, self.normalize_advantage = max_grad_norm, normalize_advantage
        self.importance_weight_cap = importance_weight_cap
        self.micro_batch_size = micro_batch_size
        self.correction_totals: dict[str, float] = {}

    @property
    def behaviour_network(self) -> nn.Module:
        return self.policy

    def make_optimizers(self) -> list[torch.optim.Optimizer]:
        parameters = dict.fromkeys([*self.policy.parameters(), *self.value.parameters()])  # a shared trunk once
        return [adam(list(parameters), lr=self.lr, eps=self.adam_eps)]

    def minibatches_per_epoch(self, steps: int) -> int:
        return math.ceil(steps / self.minibatch_size)

    def planned_updates(self, total_frames: int) -> int:
        frames_per_batch = self.experience.frames_per_batch if self.experience is not None else total_frames
        per_rollout = self.epochs * self.minibatches_per_epoch(frames_per_batch)
        return math.ceil(total_frames / frames_per_batch) * per_rollout

    def current_clip_range(self) -> float:
        """``clip_range``, annealed over the run's planned updates."""
        if self.clip_range_final_fraction == 1.0 or self.experience is None:
            return self.clip_range
        progress = min(1.0, self.learner_steps / max(1, self.planned_updates(self.experience.total_frames)))
        return self.clip_range * (1.0 - progress * (1.0 - self.clip_range_final_fraction))

    def update_rollout(self, rollout: TensorDictBase) -> dict[str, torch.Tensor]:
        steps, correction = self.prepare(rollout)
        terms = self._epochs(steps, self.current_clip_range())
        if isinstance(self.policy.normalizer, ObservationNormalizer):  # the next version's statistics
            self.policy.normalizer.update(rollout["observation"])
        # kl_behaviour_max: the run's largest per-rollout KL (summary.json)
        self._tally({**correction, "kl_behaviour_max": correction["kl_behaviour"],
                     "clip_fraction": terms["clip_fraction"],
                     "clip_fraction_first_epoch": terms["clip_fraction_first_epoch"],
                     "policy_lag": torch.tensor(self.policy_lag),
                     "policy_lag_steps": torch.tensor(self.policy_lag_steps)})
        return {**terms, **correction}

    @torch.no_grad()
    def prepare(self, rollout: TensorDictBase) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """What the epochs train on, one row per step of the rollout ``[envs, T]``: the
        normalized ``observation``, the ``action``, ``pi_prox``'s log-probability of it
        (``prox_log_prob``), the ``advantage`` and the value target ``return`` from fp32
        values (GAE in lock-step; V-trace with rho-bar = c-bar = 1 when the actors collect
        asynchronously), and the truncated importance ``weight``; and the correction's
        logged terms (:func:`~actorq.algos.on_policy.behaviour_correction`)."""
        step = rollout_fields(rollout)
        observation = self.policy.normalizer(step["observation"])
        features, value = self.features_and_value_in_chunks(observation)
        next_value = self.next_values(value, step)
        prox_log_prob = self.policy.head.log_prob(features, step["action"])
        reward = (step["reward"] if self.reward_scaler is None
                  else self.reward_scaler(step["reward"], step["done"], step["worker"], step["segment"]))
        ends = step["terminated"], step["done"]
        if self.asynchronous:  # mu lags pi_prox by versions too: V-trace's truncated traces
            returns, advantage = vtrace(prox_log_prob - step["log_prob"], reward, value, next_value, *ends,
                                        self.gamma, self.gae_lambda)
        else:
            advantage = gae(reward, value, next_value, *ends, self.gamma, self.gae_lambda)
            returns = advantage + value
        correction = behaviour_correction(prox_log_prob, step["log_prob"], self.importance_weight_cap)
        steps = {
            "observation": observation.reshape(-1, *self.spec.observation_shape),
            "action": step["action"].reshape(-1, *step["action"].shape[2:]),
            "prox_log_prob": prox_log_prob.reshape(-1),
            "advantage": advantage.reshape(-1),
            "return": returns.reshape(-1),
            "weight": correction.pop("weight").reshape(-1),
        }
        return steps, correction

    def next_values(self, value: torch.Tensor, step: dict[str, torch.Tensor]) -> torch.Tensor:
        """``V(s'_t)`` for each step of a rollout whose values ``V(s_t)`` are ``value``
        ``[envs, T]``: where the episode goes on, ``s'_t`` is ``s_{t+1}`` and its value is
        taken from ``value``; only the steps that end an episode (their final observation)
        and each row's last step run the networks again."""
        fresh = step["done"].clone()
        fresh[:, -1] = True
        next_value = torch.empty_like(value)
        next_value[:, :-1] = value[:, 1:]
        rows, steps = fresh.nonzero(as_tuple=True)
        final = self.policy.normalizer(step["next_observation"][rows, steps])
        next_value[rows, steps] = self.features_and_value_in_chunks(final)[1]
        return next_value

    def features_and_value_in_chunks(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`features_and_value` of observations ``[..., *observation_shape]`` (no
        gradients), :data:`VALUE_CHUNK` at a time: a whole rollout's activations at once leave
        the caches, and small forwards run faster (docs/measured/pixels.md)."""
        event_dims = len(self.spec.observation_shape)
        batch_shape = observation.shape[:observation.dim() - event_dims]
        flat = observation.reshape(-1, *self.spec.observation_shape)
        parts = [self.features_and_value(chunk) for chunk in flat.split(VALUE_CHUNK)]
        features, value = torch.cat([part[0] for part in parts]), torch.cat([part[1] for part in parts])
        return features.reshape(*batch_shape, *features.shape[1:]), value.reshape(batch_shape)

    def features_and_value(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the policy's head reads for each (normalized) observation, and its value; a
        shared trunk runs once for both. Under a bf16-mixed learner the trunks autocast and
        the output layers (logits or mean, value) run in fp32 (:func:`~actorq.algos.networks.in_fp32`)."""
        if self.shared_trunk:  # convolutions take one batch dimension: [envs, T, C, H, W] goes in flat
            frame_shape = self.spec.frame_shape
            batch_shape = observation.shape[:observation.dim() - len(frame_shape)]
            hidden = self.policy.trunk[0](observation.reshape(-1, *frame_shape))
            features, value = in_fp32(self.policy.trunk[1], hidden), in_fp32(self.value[1], hidden)
            return features.reshape(*batch_shape, -1), value.reshape(batch_shape)
        return through_fp32_output(self.policy.trunk, observation), through_fp32_output(self.value, observation).squeeze(-1)

    def _epochs(self, steps: dict[str, torch.Tensor], clip: float) -> dict[str, torch.Tensor]:
        """``epochs`` passes over the rollout in shuffled minibatches; the losses' means, and
        the share of steps whose ratio ``pi / pi_prox`` was outside ``1 +- clip`` (over every
        epoch, as SB3 logs it, and in the first epoch alone)."""
        rows = len(steps["advantage"])
        sums = {"loss_policy": 0.0, "loss_value": 0.0, "entropy": 0.0}
        clipped = clipped_first_epoch = 0.0
        for epoch in range(self.epochs):
            for index in torch.randperm(rows).split(self.minibatch_size):
                terms, ratio = self.update_minibatch({name: tensor[index] for name, tensor in steps.items()}, clip)
                for name in sums:
                    sums[name] += float(terms[name])
                outside = float(((ratio - 1).abs() > clip).sum())
                clipped += outside
                if epoch == 0:
                    clipped_first_epoch += outside
        updates = self.epochs * self.minibatches_per_epoch(rows)
        means = {name: torch.tensor(total / updates) for name, total in sums.items()}
        return {**means, "clip_fraction": torch.tensor(clipped / (rows * self.epochs)),
                "clip_fraction_first_epoch": torch.tensor(clipped_first_epoch / rows), "clip_range": torch.tensor(clip)}

    def update_minibatch(self, batch: dict[str, torch.Tensor], clip: float | None = None
                         ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One gradient update on a minibatch of :meth:`prepare`'s rows (``observation``,
        ``action``, ``prox_log_prob``, ``advantage``, ``return``, ``weight``) with clip range
        ``clip`` (``None``: where the run stands); its loss terms and the ratios ``pi / pi_prox``.
        With ``micro_batch_size`` smaller than the minibatch, the loss is taken in parts of
        that many rows whose gradients add up to the minibatch's (advantages normalized over
        the whole minibatch first). What ``trainer.precision=auto`` times."""
        clip = self.current_clip_range() if clip is None else clip
        rows = len(batch["advantage"])
        size = self.micro_batch_size if isinstance(self.micro_batch_size, int) else rows  # "auto": until timed
        if size >= rows:
            loss, terms, ratio = self._loss(batch, clip)
            self.gradient_step(self.optimizers(), loss, self.max_grad_norm)
            return terms, ratio
        batch = {**batch, "advantage": self.normalized(batch["advantage"])}
        terms: dict[str, torch.Tensor] = {}
        ratios = []

        def parts():
            for start in range(0, rows, size):
                part = {name: tensor[start:start + size] for name, tensor in batch.items()}
                share = len(part["advantage"]) / rows
                loss, part_terms, ratio = self._loss(part, clip, normalize=False)
                for name, value in part_terms.items():
                    terms[name] = terms.get(name, 0.0) + value * share
                ratios.append(ratio)
                yield loss * share

        self.gradient_step(self.optimizers(), parts(), self.max_grad_norm)
        return terms, torch.cat(ratios)

    def normalized(self, advantage: torch.Tensor) -> torch.Tensor:
        """``advantage`` standardized, if ``normalize_advantage`` and it has more than one row."""
        if self.normalize_advantage and len(advantage) > 1:
            return (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        return advantage

    def _loss(self, batch: dict[str, torch.Tensor], clip: float, normalize: bool = True
              ) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """The decoupled clipped surrogate, the value loss and the entropy bonus of one minibatch
        (its advantages standardized here unless ``normalize`` is false)."""
        features, value = self.features_and_value(batch["observation"])
        log_prob = self.policy.head.log_prob(features, batch["action"])
        ratio = (log_prob - batch["prox_log_prob"]).exp()
        advantage = self.normalized(batch["advantage"]) if normalize else batch["advantage"]
        surrogate = torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage)
        loss_policy = -(batch["weight"] * surrogate).mean()
        loss_value = (batch["return"] - value).pow(2).mean()
        entropy = self.policy.head.entropy(features).mean()
        loss = loss_policy + self.value_coef * loss_value - self.entropy_coef * entropy
        terms = {"loss_policy": loss_policy.detach(), "loss_value": loss_value.detach(), "entropy": entropy.detach()}
        return loss, terms, ratio.detach()

    # --- the correction over the run (summary.json; a resumed run's totals go on) ----------

    def counters(self) -> dict:
        return {**super().counters(), "behaviour_correction": dict(self.correction_totals)}

    def restore_counters(self, state: dict) -> None:
        super().restore_counters(state)
        self.correction_totals = dict(state.get("behaviour_correction", {}))

    def _tally(self, values: dict[str, torch.Tensor]) -> None:
        totals = self.correction_totals
        totals["rollouts"] = totals.get("rollouts", 0) + 1
        for name, value in values.items():
            if is_maximum(name):
                totals[name] = max(totals.get(name, -math.inf), float(value))
            else:
                totals[name] = totals.get(name, 0.0) + float(value)

    def summary_fields(self) -> dict:
        """``behaviour_correction`` for summary.json: each logged correction term's mean over
        the run's rollouts (its maximum, for maxima and the policy lags)."""
        totals = dict(self.correction_totals)
        rollouts = totals.pop("rollouts", 0)
        if not rollouts:
            return {"behaviour_correction": None}
        return {"behaviour_correction": {
            "rollouts": rollouts,
            **{name: (value if is_maximum(name) else value / rollouts)
               for name, value in totals.items()},
        }}


def is_maximum(name: str) -> bool:
    """Whether a correction term is summarized over the run by its maximum (maxima and the
    policy lags), not its mean."""
    return name.endswith("_max") or name.startswith("policy_lag")


def pixel_actor_critic(spec: EnvSpec, trunk: str, normalize_observations: bool) -> tuple[StochasticPolicy, nn.Sequential]:
    """A policy and a value network for frames that share one convolutional trunk: the
    policy is ``trunk -> Linear(actions)`` under a categorical head, the value
    ``trunk -> Linear(1)`` (CleanRL's ``ppo_atari``).

    Raises:
        ConfigError: continuous actions, or observation normalization (frames are scaled
            inside the trunk).
    """
    if not spec.discrete:
        raise ConfigError("PPO on frames needs discrete actions (the convolutional policy is categorical)")
    if normalize_observations:
        raise ConfigError("algo.normalize_observations=true is for vector observations; the convolutional "
                          "trunks scale frames themselves")
    shared = make_trunk(trunk, spec.frame_shape)
    policy = StochasticPolicy(nn.Sequential(shared, nn.Linear(shared.features, spec.num_actions)), CategoricalHead())
    return policy, nn.Sequential(shared, nn.Linear(shared.features, 1))


def orthogonal_(network: nn.Sequential, output_gain: float) -> None:
    """Orthogonal weights with gain sqrt(2) for hidden layers (convolutions included) and
    ``output_gain`` for the last ``Linear``, zero biases (the initialisation of the PPO
    paper's implementation and CleanRL's)."""
    linears = [module for module in network.modules() if isinstance(module, (nn.Linear, nn.Conv2d))]
    for index, linear in enumerate(linears):
        nn.init.orthogonal_(linear.weight, gain=output_gain if index == len(linears) - 1 else math.sqrt(2))
        nn.init.zeros_(linear.bias)
