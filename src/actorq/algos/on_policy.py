"""The on-policy learner family: each batch is a rollout ``[envs, T]`` straight from the actors.

No replay: the actors' batch of one round (lock-step collection, ``actors.collection=lockstep``,
what ``auto`` picks for this family) or of one worker (asynchronous collection) is the
rollout, used once and dropped. The actors record with every step what
:attr:`OnPolicyLearner.records` asks for: the log-probability of the action under the policy
they acted with (``log_prob``; the int8 policy when the actors run int8), that policy's
version (``policy_version``) and the actor worker that acted (``worker``). Quantized actors are a behaviour policy, so an on-policy
learner corrects for the difference between what they ran and what it trains, e.g. with
:func:`truncated_importance_weights`; every batch logs how far behind the learner the
actors' policy was, in pushed versions (``collect/policy_lag``) and in gradient updates
(``collect/policy_lag_steps``).

The family pushes its policy after the updates of every rollout (``push_every_n_steps = 1``:
each batch's updates end with a push) and its actors take no random action (a random action
has no log-probability under the policy), so in lock-step collection every round runs the
learner's policy as the previous round left it: both lags are 0, and a lock-step rollout
that lags is refused as the bug it is.

A subclass says what its networks and optimizers are and what it makes of one rollout
(:meth:`OnPolicyLearner.update_rollout`), calling :meth:`OnPolicyLearner.gradient_step` for
each gradient update.

Example:
    >>> import torch
    >>> reward = torch.tensor([[1.0, 1.0, 1.0]])
    >>> value, next_value = torch.zeros(1, 3), torch.tensor([[0.0, 0.0, 10.0]])
    >>> no = torch.zeros(1, 3, dtype=torch.bool)
    >>> gae(reward, value, next_value, terminated=no, done=no, gamma=0.5, lam=1.0)  # bootstrapped at the end
    tensor([[3., 4., 6.]])
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable
from typing import Any

import torch
from tensordict import TensorDictBase

from actorq.algos.base import Exploration, Learner
from actorq.algos.networks import merge_moments
from actorq.envs import EnvSpec


class OnPolicyLearner(Learner):
    """Base on-policy learner: whole rollouts in, a few gradient updates out, no replay.

    Args:
        spec: the environment spec.
        exploration: unused by the policy's own sampling; kept so every learner is built
            the same way (default: a scale of 0).
        gamma: discount factor.
        final_lr_fraction: see :class:`~actorq.algos.base.Learner`.
        max_policy_lag: a rollout whose oldest steps ran a policy more than this many
            pushed versions behind the learner's is dropped, not trained on (counted in
            ``collect/stale_frames``); ``None``: no bound. Only asynchronous collection lags.

    Attributes:
        updates_per_rollout: gradient updates :meth:`update_rollout` makes of one rollout
            (the learning-rate schedule plans with it).
        policy_lag: pushed policy versions between the learner's policy and the oldest
            the actors acted with in the last rollout (0 in lock-step collection).
        policy_lag_steps: gradient updates between the learner's policy when the last
            rollout arrived and the oldest version the actors acted with in it (0 in
            lock-step collection).
        asynchronous: whether the actors collect while the learner trains
            (``actors.collection=async``; set by ``actorq.train``), so rollouts lag.
        stale_frames: frames of the rollouts dropped for lagging more than ``max_policy_lag``.
    """

    experience_kind = "rollout"
    records = ("log_prob", "policy_version", "worker")
    stochastic = True
    push_every_n_steps = 1  # a batch's updates all happen in one step of the loop: a push per rollout
    init_random_frames = 0
    updates_per_rollout: int = 1

    def __init__(self, spec: EnvSpec, exploration: Exploration | None = None, gamma: float = 0.99,
                 final_lr_fraction: float = 1.0, max_policy_lag: int | None = None):
        super().__init__(spec, exploration, gamma=gamma,
                         final_lr_fraction=final_lr_fraction)
        if max_policy_lag is not None and max_policy_lag < 0:
            raise ValueError(f"max_policy_lag must be >= 0 or null, got {max_policy_lag}")
        self.max_policy_lag = max_policy_lag
        self.policy_lag = 0
        self.policy_lag_steps = 0
        self.pushed_at: dict[int, int] = {}  # policy version -> learner steps when it was pushed
        self.asynchronous = False
        self.stale_frames = 0

    @abstractmethod
    def update_rollout(self, rollout: TensorDictBase) -> dict[str, torch.Tensor]:
        """The gradient updates of one rollout ``[envs, T]``; returns named, detached terms."""

    def gradient_step(self, optimizer, loss: torch.Tensor | Iterable[torch.Tensor], max_grad_norm: float = 0.0) -> None:
        """One gradient update (:meth:`~actorq.algos.base.Learner.optimize`), counted,
        with the learning-rate schedule stepped."""
        self.optimize(optimizer, loss, max_grad_norm)
        self.learner_steps += 1
        self.step_schedulers()

    def planned_updates(self, total_frames: int) -> int:
        """Gradient updates a run of ``total_frames`` env frames makes: ``updates_per_rollout``
        for each batch of ``experience.frames_per_batch`` frames."""
        frames_per_batch = self.experience.frames_per_batch if self.experience is not None else total_frames
        return math.ceil(total_frames / frames_per_batch) * self.updates_per_rollout

    def learn(self, batch: TensorDictBase, new_frames: int) -> dict[str, torch.Tensor]:
        rollout = batch if batch.ndim == 2 else batch.unsqueeze(0)  # one env: [T] -> [1, T]
        if self.device.type != "cpu":
            rollout = rollout.to(self.device)
        self.measure_lag(int(rollout["policy_version"].min()))
        if self.max_policy_lag is not None and self.policy_lag > self.max_policy_lag:
            self.stale_frames += rollout.numel()
            return {}
        return self.update_rollout(rollout)

    def measure_lag(self, oldest_version: int) -> None:
        """Sets :attr:`policy_lag` and :attr:`policy_lag_steps` of a rollout whose oldest
        steps ran ``oldest_version``.

        A push happens between two batches, never during one's updates, so the version
        pushed when a batch arrives holds the learner's weights of this very step: it is
        noted here, and a rollout's lag in updates is counted from its version's note.

        Raises:
            RuntimeError: a lock-step rollout lags: the learner's policy is not the one the
                actors ran, which the lock-step math (GAE, ``pi_prox``) assumes.
        """
        version = self.experience.policy_version
        self.pushed_at.setdefault(version, self.learner_steps)
        self.policy_lag = version - oldest_version
        noted = [known for known in self.pushed_at if known <= oldest_version] or [min(self.pushed_at)]
        self.policy_lag_steps = self.learner_steps - self.pushed_at[max(noted)]
        if not self.asynchronous and (self.policy_lag or self.policy_lag_steps):
            raise RuntimeError(
                f"{type(self).__name__} got a lock-step rollout of policy version {oldest_version}, "
                f"{self.policy_lag} versions and {self.policy_lag_steps} updates behind its own: the "
                "policy must be pushed after every rollout's updates, before the next round starts")

    def log_values(self) -> dict[str, float]:
        values = {"collect/policy_lag": float(self.policy_lag),
                  "collect/policy_lag_steps": float(self.policy_lag_steps)}
        if self.max_policy_lag is not None:
            values["collect/stale_frames"] = float(self.stale_frames)
        return values

    def counters(self) -> dict[str, Any]:
        return {"stale_frames": self.stale_frames}

    def restore_counters(self, state: dict[str, Any]) -> None:
        self.stale_frames = state.get("stale_frames", 0)


def gae(reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor, terminated: torch.Tensor,
        done: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Generalized advantage estimates (Schulman et al. 2016) of a rollout ``[envs, T]``.

    ``delta_t = r_t + gamma * (1 - terminated_t) * V(s'_t) - V(s_t)`` and
    ``A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}``, with ``A_T = 0``: an episode cut
    by a time limit (done, not terminated) bootstraps from the value of its last observation,
    a terminated one does not, and the rollout's last step bootstraps from ``V(s'_{T-1})``.

    Args:
        reward, value, next_value: ``[envs, T]``: ``r_t``, ``V(s_t)``, ``V(s'_t)``.
        terminated, done: ``[envs, T]`` booleans: the episode ended in a terminal state; it
            ended for any reason (terminal or truncated).
        gamma: discount.
        lam: GAE's lambda (1: Monte-Carlo returns bootstrapped at the rollout's end; 0: TD(0)).
    """
    delta = reward + gamma * (~terminated).float() * next_value - value
    carry = gamma * lam * (~done).float()
    advantage = torch.zeros_like(delta)
    running = torch.zeros_like(delta[:, 0])
    for t in range(delta.shape[1] - 1, -1, -1):
        running = delta[:, t] + carry[:, t] * running
        advantage[:, t] = running
    return advantage


def vtrace(log_ratio: torch.Tensor, reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor,
           terminated: torch.Tensor, done: torch.Tensor, gamma: float, lam: float = 1.0, rho_bar: float = 1.0,
           c_bar: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets (Espeholt et al. 2018) of a rollout ``[envs, T]`` collected by a
    behaviour policy ``mu`` for a target policy ``pi``, and the advantages of its actions.

    With ``rho_t = min(rho_bar, pi/mu)`` and ``c_t = lam * min(c_bar, pi/mu)``:
    ``delta_t = rho_t (r_t + gamma (1 - terminated_t) V(s'_t) - V(s_t))`` and
    ``v_t - V(s_t) = delta_t + gamma c_t (1 - done_t) (v_{t+1} - V(s_{t+1}))``, the rollout's
    last step and every episode end bootstrapping from ``V(s'_t)`` (0 if terminated). The
    advantage is ``r_t + gamma (1 - terminated_t) v'_t - V(s_t)``, where ``v'_t`` is
    ``v_{t+1}``, or ``V(s'_t)`` at an episode's or the rollout's end; it carries no
    ``rho_t`` (the policy loss weighs each step itself). With ``pi == mu`` the targets are
    ``V + GAE(lam)``.

    Args:
        log_ratio: ``log pi(a_t|s_t) - log mu(a_t|s_t)``.
        reward, value, next_value, terminated, done, gamma: as for :func:`gae`.
        lam: the traces' lambda.
        rho_bar, c_bar: the truncation of the TD errors' and of the traces' ratios.

    Returns:
        ``(targets v_t, advantages)``, each ``[envs, T]``.

    Example:
        >>> no = torch.zeros(1, 2, dtype=torch.bool)
        >>> targets, advantage = vtrace(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2),
        ...                             torch.zeros(1, 2), no, no, gamma=0.5)
        >>> targets, advantage  # v_1 = 1, v_0 = 1 + 0.5 * 1; A_0 = 1 + 0.5 * v_1
        (tensor([[1.5000, 1.0000]]), tensor([[1.5000, 1.0000]]))
    """
    ratio = log_ratio.exp()
    rho, c = ratio.clamp(max=rho_bar), lam * ratio.clamp(max=c_bar)
    continues = (~done).float()
    delta = rho * (reward + gamma * (~terminated).float() * next_value - value)
    targets = torch.empty_like(value)
    running = torch.zeros_like(value[:, 0])  # v_{t+1} - V(s_{t+1})
    for t in range(value.shape[1] - 1, -1, -1):
        running = delta[:, t] + gamma * c[:, t] * continues[:, t] * running
        targets[:, t] = value[:, t] + running
    following = torch.cat([targets[:, 1:], next_value[:, -1:]], dim=1)
    following = torch.where(done, next_value, following)
    advantage = reward + gamma * (~terminated).float() * following - value
    return targets, advantage


def truncated_importance_weights(log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor,
                                 clip: float = 1.0) -> torch.Tensor:
    """``min(pi(a|s) / mu(a|s), clip)``, detached: how much an action the actors' policy ``mu``
    took counts for the learner's ``pi`` (truncated importance sampling, as in V-trace's
    rho-bar). With fp32 actors in lock-step, ``pi == mu`` at the first update and every weight
    is 1.

    Example:
        >>> truncated_importance_weights(torch.log(torch.tensor([0.5, 0.2])), torch.log(torch.tensor([0.25, 0.4])))
        tensor([1.0000, 0.5000])
    """
    return (log_prob.detach() - behaviour_log_prob).exp().clamp(max=clip)


ROUNDING = 1e-5
"""Relative differences of an importance ratio from 1 that are float rounding, not policy."""


def behaviour_correction(prox_log_prob: torch.Tensor, behaviour_log_prob: torch.Tensor,
                         cap: float = 1.0) -> dict[str, torch.Tensor]:
    """The truncated importance weights ``min(pi_prox / mu, cap)`` of the actors' actions, and
    what they say about the actors' policy ``mu``.

    Returns:
        ``weight`` (shaped like the inputs), and scalars: ``kl_behaviour``, an estimate of
        ``KL(mu || pi_prox)`` from the actors' own actions (``E_mu[(r - 1) - log r]`` with
        ``r = pi_prox / mu``: unbiased, never negative); ``importance_weight_mean`` and
        ``importance_weight_max`` of the weights; ``truncated_fraction``, the share of steps
        whose ratio exceeded ``cap`` by more than float rounding (:data:`ROUNDING`: the
        same fp32 policy run at another batch size differs in the last bits);
        ``gradient_kept``, the share of the ratios' total that the weights keep
        (``sum w / sum r``: 1 without truncation); ``effective_sample_size``, the ratios'
        ``(sum r)^2 / (n sum r^2)`` as a share of the steps (1 when ``mu == pi_prox``); and
        ``ratio_spread``, the mean ``exp(|log r|)`` (1 when ``mu == pi_prox``).

    Example:
        >>> mu = torch.log(torch.tensor([0.5, 0.25]))
        >>> terms = behaviour_correction(torch.log(torch.tensor([0.5, 0.5])), mu)
        >>> terms["weight"], float(terms["truncated_fraction"]), float(terms["gradient_kept"])
        (tensor([1., 1.]), 0.5, 0.6666666865348816)
    """
    log_ratio = prox_log_prob.detach() - behaviour_log_prob
    ratio = log_ratio.exp()
    weight = ratio.clamp(max=cap)
    return {
        "weight": weight,
        "kl_behaviour": (torch.expm1(log_ratio) - log_ratio).mean(),  # (r - 1) - log r, without cancellation
        "importance_weight_mean": weight.mean(),
        "importance_weight_max": weight.max(),
        "truncated_fraction": (ratio > cap * (1 + ROUNDING)).float().mean(),
        "gradient_kept": weight.sum() / ratio.sum(),
        "effective_sample_size": ratio.sum().pow(2) / (ratio.numel() * ratio.pow(2).sum()),
        "ratio_spread": log_ratio.abs().exp().mean(),
    }


class RewardScaler(torch.nn.Module):
    """Divides rewards by the running standard deviation of the discounted return, per env
    (SB3's ``VecNormalize(norm_reward=True)``), clipped to ``[-clip, clip]``. A learner-side
    option: the actors never see the scale.

    An env is a row of an actor worker's batch. Given ``worker``, the worker each row of the
    rollout came from (what the actors record), worker ``w``'s ``i``-th row goes on from the
    return ``w``'s ``i``-th row reached in the last rollout that had ``w``'s rows, whatever
    came in between: a lock-step round holds every worker's rows, an asynchronous batch one
    worker's. Without ``worker``, row ``i`` goes on from row ``i``.

    The statistics are buffers (saved in checkpoints); each env's running return is not,
    and starts again at 0 after a resume or when the number of a worker's envs changes.

    Example:
        >>> scaler = RewardScaler(gamma=1.0)
        >>> no = torch.zeros(1, 2, dtype=torch.bool)
        >>> scaled = scaler(torch.tensor([[1.0, 1.0]]), done=no)  # returns 1 and 2: std 0.5
        >>> torch.round(scaled, decimals=3)
        tensor([[2., 2.]])
    """

    def __init__(self, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("var", torch.ones(()))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self._returns: dict[int, torch.Tensor] = {}  # worker -> the running return of each of its envs

    def forward(self, reward: torch.Tensor, done: torch.Tensor, worker: torch.Tensor | None = None,
                segment: torch.Tensor | None = None) -> torch.Tensor:
        """``reward`` ``[envs, T]`` scaled, after the running return statistics took it in;
        ``worker`` ``[envs]``: the actor worker of each row (``None``: rows are envs);
        ``segment`` ``[envs]``: which of its worker's batches in a gathered round the row is
        (each worker's batches are taken in turn, each going on from the one before)."""
        if segment is not None and bool(segment.any()):
            scaled = torch.empty_like(reward)
            for number in segment.unique().tolist():  # in order
                rows = (segment == number).nonzero()[:, 0]
                scaled[rows] = self(reward[rows], done[rows], None if worker is None else worker[rows])
            return scaled
        envs, steps = reward.shape
        rows = rows_by_worker(torch.zeros(envs, dtype=torch.int64) if worker is None else worker)
        returns = torch.empty(envs, steps, dtype=torch.float64, device=reward.device)
        running = self._running_returns(rows, envs, reward.device)
        for t in range(steps):
            running = running * self.gamma + reward[:, t].double()
            returns[:, t] = running
            running = running.masked_fill(done[:, t], 0.0)
        self._returns.update({index: running[at] for index, at in rows.items()})
        merge_moments(self.mean, self.var, self.count, returns.reshape(-1))
        return (reward / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    def _running_returns(self, rows: dict[int, torch.Tensor], envs: int, device: torch.device) -> torch.Tensor:
        """Where each row's env left its return (0 for an env not seen before)."""
        running = torch.zeros(envs, dtype=torch.float64, device=device)
        for index, at in rows.items():
            kept = self._returns.get(index)
            if kept is not None and len(kept) == len(at):
                running[at] = kept
        return running


def rows_by_worker(worker: torch.Tensor) -> dict[int, torch.Tensor]:
    """The rows of each worker in ``worker`` ``[envs]``, in order: its envs 0, 1, ...

    Example:
        >>> rows_by_worker(torch.tensor([2, 2, 0]))
        {0: tensor([2]), 2: tensor([0, 1])}
    """
    return {int(index): (worker == index).nonzero().squeeze(1) for index in worker.unique()}


def rollout_fields(rollout: TensorDictBase) -> dict[str, Any]:
    """The fields of a rollout ``[envs, T]`` every on-policy update reads, shaped ``[envs, T]``
    (or ``[envs, T, dim]`` for observations): ``observation``, ``next_observation``, ``action``,
    ``reward``, ``terminated``, ``done`` and the actors' ``log_prob``; and ``worker`` ``[envs]``,
    the actor worker each row came from (``None`` if the rollout does not record it), and
    ``segment`` ``[envs]``, which of its worker's batches in a gathered round the row is
    (``None`` unless rounds are gathered, :func:`actorq.actors.base.gather_rounds`)."""
    shape = rollout.shape
    return {
        "observation": rollout["observation"],
        "next_observation": rollout["next", "observation"],
        "action": rollout["action"],
        "reward": rollout["next", "reward"].reshape(shape).float(),
        "terminated": rollout["next", "terminated"].reshape(shape),
        "done": rollout["next", "done"].reshape(shape),
        "log_prob": rollout["log_prob"].reshape(shape),
        "worker": rollout["worker"].reshape(shape)[:, 0] if "worker" in rollout.keys() else None,
        "segment": rollout["segment"].reshape(shape)[:, 0] if "segment" in rollout.keys() else None,
    }
