"""``actorq bench learner``: how fast is the learner, against its peer and without Lightning?

Runs the same algorithm on the same networks, replay and experience, in one process:
once as our LightningModule under a real ``lightning.Trainer`` (manual optimization,
logging, callbacks), once as a bare PyTorch loop calling the algorithm's own ``update`` with
plain ``torch.optim`` optimizers, a plain ``loss.backward()`` and no Trainer. Reports updates
per second and their ratio (target: >= 0.9). A third side, the bare loop with torch's
default (foreach) Adam in place of the learners' fused one, shows what the fused kernel gains.

The peer side is Stable-Baselines3's own ``TD3.train()`` / ``SAC.train()`` / ``DQN.train()``
at the same shapes (networks, batch, hyperparameters that cost time): one gradient step per
call, as the RL Zoo's ``train_freq=1, gradient_steps=1`` runs it, on SB3's own replay buffer
filled with random transitions. ``ours_vs_sb3`` is the Lightning side's updates/s over SB3's
(target for TD3 and SAC: >= 2.0). ``--env-shape`` picks the shapes: ``halfcheetah``
(Gymnasium ``HalfCheetah-v5``: obs 17, action 6) or ``pendulum`` (obs 3, action 1); DQN
always has CartPole's (obs 4, 2 actions). All sides run interleaved, each keeps its best round,
with one intra-op thread by default (``--threads``).

``--compile`` adds a side: the Lightning learner with ``compile_losses`` (``torch.compile``
of the critic and actor losses, forward and backward), ``compile_gain`` its updates/s over
the eager Lightning side's (TD3 and SAC; its first round pays for compiling, so give it 2+).

``--precision auto`` asks another question: does ``trainer.precision=auto``
(:mod:`actorq.run.learner_precision`) pick the faster learner here? It times the same learner
under a real Trainer at ``32-true`` and at ``bf16-mixed`` (interleaved rounds), lets
``auto`` measure and pick as a run does, and reports auto's updates/s over the faster's
(target: >= 0.95). Its default learner is ``td3_pendulum_wide``'s (2048x3 actor, 256x2
critics, batch 64) and a 64-wide one.

Usage (``tests/integration/test_bench_smoke.py`` and ``tests/unit/test_learner_precision.py`` run the quick forms)::

    actorq bench learner [--algos td3 sac dqn] [--env-shape halfcheetah] [--hidden 256] [--quick]
                                   [--compile] [--out FILE.json]
    actorq bench learner --precision auto [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Sequence

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from tensordict import TensorDict

from actorq.algos.base import Exploration
from actorq.algos.dqn import DQN
from actorq.algos.sac import SAC
from actorq.algos.td3 import TD3
from actorq.bench._table import report
from actorq.envs import EnvSpec
from actorq.run.learner_precision import CANDIDATES, choose, time_updates, without_trainer
from actorq.data.nstep import nstep_transitions
from actorq.algos.batches import Arrivals
from actorq.data.writer import TransitionWriter
from actorq.data.replay.uniform import UniformReplay
from actorq.util.arguments import as_options

TARGET_RATIO = 0.9
TARGET_AUTO = 0.95  # --precision auto: auto's updates/s over the faster precision's
TARGET_VS_SB3 = {"td3": 2.0, "sac": 2.0}  # our Lightning learner's updates/s over SB3's train()
PENDULUM = EnvSpec(obs_dim=3, discrete=False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
HALFCHEETAH = EnvSpec(obs_dim=17, discrete=False, action_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)
CARTPOLE = EnvSpec(obs_dim=4, discrete=True, num_actions=2)
ENV_SHAPES = {"halfcheetah": HALFCHEETAH, "pendulum": PENDULUM}
GYM_IDS = {"halfcheetah": "HalfCheetah-v5", "pendulum": "Pendulum-v1", "cartpole": "CartPole-v1"}


def fake_experience(spec: EnvSpec, batches: int, frames: int, seed: int = 0) -> list[TensorDict]:
    """Collector-shaped batches of random transitions (no environment in the timing)."""
    generator = torch.Generator().manual_seed(seed)

    def one() -> TensorDict:
        obs = torch.randn(frames, spec.obs_dim, generator=generator)
        action = (torch.randint(spec.num_actions, (frames,), generator=generator) if spec.discrete
                  else torch.rand(frames, spec.action_dim, generator=generator) * 4 - 2)
        done = torch.rand(frames, 1, generator=generator) < 0.01
        return TensorDict({"observation": obs, "action": action,
                           "next": {"observation": torch.randn(frames, spec.obs_dim, generator=generator),
                                    "reward": torch.randn(frames, 1, generator=generator),
                                    "done": done, "terminated": done}}, batch_size=[frames])

    return [one() for _ in range(batches)]


class Batches:
    """An iterable of batches; a plain list would be read as a list of dataloaders."""

    def __init__(self, batches: list[TensorDict]):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class PreparedExperience(L.LightningDataModule):
    """Stands in for the experience pipeline: prepared batches, a replay and a writer."""

    def __init__(self, batches: list[TensorDict], n_step: int, gamma: float):
        super().__init__()
        self.batches = batches
        self.total_frames = sum(batch.numel() for batch in batches)
        self.replay = UniformReplay(100_000)
        self.sampling = self.replay
        self.writer = TransitionWriter(self.replay, n_step, gamma)

    def receive(self, batch: TensorDict) -> Arrivals:
        self.writer.extend(batch)
        return self.writer.arrivals()

    def actor_counters(self) -> dict[str, int]:
        return {}  # no actors: the batches are prepared

    def train_dataloader(self):
        return Batches(self.batches)

    def transfer_batch_to_device(self, batch, device, dataloader_idx: int):
        return batch


class SteadyClock(Callback):
    """Times the updates after the first batch (Trainer start-up is not the learner's speed)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 0:
            self.start, self.start_steps = time.perf_counter(), pl_module.learner_steps
        self.end, self.end_steps = time.perf_counter(), pl_module.learner_steps

    def updates_per_s(self) -> float:
        return (self.end_steps - self.start_steps) / (self.end - self.start)


def make_learner(algo: str, hidden: int, batch_size: int, seed: int, layers: int = 2,
                 critic_hidden: int | None = None, env_shape: str = "pendulum"):
    """``layers`` hidden layers of ``hidden`` units (the policy); TD3's and SAC's two critics
    have two of ``critic_hidden`` (default ``hidden``). Continuous algorithms take
    ``env_shape``'s dimensions; DQN CartPole's."""
    torch.manual_seed(seed)
    common = dict(batch_size=batch_size, learning_starts=0, update_to_data=1.0)
    if algo == "dqn":
        return DQN(CARTPOLE, Exploration(0.1), hidden=(hidden,) * layers, target_tau=1.0,
                   target_update_period=100, **common), CARTPOLE
    spec = ENV_SHAPES[env_shape]
    networks = dict(actor_hidden=(hidden,) * layers, critic_hidden=(critic_hidden or hidden,) * 2)
    if algo == "sac":
        return SAC(spec, **networks, **common), spec
    return TD3(spec, Exploration(0.1), **networks, **common), spec


def make_sb3_peer(algo: str, learner, env_shape: str, actor_hidden: list[int], critic_hidden: list[int], seed: int):
    """Stable-Baselines3's model for ``algo`` with these networks, ``learner``'s batch and the
    hyperparameters that cost time (twin critics, policy delay, target noise, entropy tuning),
    its replay buffer filled with random transitions. SB3 takes its spaces from a real env."""
    try:
        import gymnasium as gym
        import stable_baselines3 as sb3
        from stable_baselines3.common.logger import Logger
    except ImportError as error:  # pragma: no cover - the bench extras install it
        raise SystemExit(f"the SB3 peer needs stable-baselines3 ({error}); pip install 'actorq[bench]' "
                         "or pass --peer none") from error
    env = gym.make(GYM_IDS["cartpole" if algo == "dqn" else env_shape])
    buffer_size = 100_000
    if algo == "dqn":
        model = sb3.DQN("MlpPolicy", env, batch_size=learner.batch_size, buffer_size=buffer_size, seed=seed,
                        gamma=learner.gamma, device="cpu", policy_kwargs=dict(net_arch=actor_hidden))
    else:
        arch = dict(pi=actor_hidden, qf=critic_hidden)
        common = dict(batch_size=learner.batch_size, buffer_size=buffer_size, seed=seed, gamma=learner.gamma,
                      tau=learner.target_tau, device="cpu", policy_kwargs=dict(net_arch=arch))
        model = (sb3.SAC("MlpPolicy", env, ent_coef="auto", **common) if algo == "sac" else
                 sb3.TD3("MlpPolicy", env, policy_delay=learner.policy_delay, target_policy_noise=learner.target_noise,
                         target_noise_clip=learner.target_noise_clip, **common))
    model.set_logger(Logger(folder=None, output_formats=[]))
    fill_sb3_replay(model.replay_buffer, env.observation_space, env.action_space, buffer_size // 10, seed)
    env.close()
    return model


def fill_sb3_replay(buffer, observation_space, action_space, transitions: int, seed: int) -> None:
    """``transitions`` random transitions of these spaces' shapes, added one at a time as SB3's
    one-env collection adds them (``n_envs=1``)."""
    generator = torch.Generator().manual_seed(seed)
    obs_dim = observation_space.shape[0]
    for _ in range(transitions):
        obs = torch.randn(1, obs_dim, generator=generator).numpy()
        action = (torch.randint(int(action_space.n), (1, 1), generator=generator) if action_space.shape == ()
                  else torch.rand(1, action_space.shape[0], generator=generator) * 2 - 1).numpy()
        buffer.add(obs, torch.randn(1, obs_dim, generator=generator).numpy(), action,
                   torch.randn(1, generator=generator).numpy(), (torch.rand(1) < 0.01).numpy(), [{}])


def sb3_updates_per_s(model, warmup: int, updates: int) -> float:
    """Updates/s of SB3's own ``train()``, one gradient step per call (the RL Zoo's default
    ``train_freq=1, gradient_steps=1``), after ``warmup`` untimed ones."""
    for _ in range(warmup):
        model.train(gradient_steps=1, batch_size=model.batch_size)
    start = time.perf_counter()
    for _ in range(updates):
        model.train(gradient_steps=1, batch_size=model.batch_size)
    return updates / (time.perf_counter() - start)


def lightning_updates_per_s(learner, experience: list[TensorDict], precision: str = "32-true") -> float:
    """Updates/s under a real Trainer; ``precision`` is ``trainer.precision`` (e.g. ``bf16-mixed``)."""
    clock = SteadyClock()
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[clock],
                        num_sanity_val_steps=0, precision=precision)
    prepared = PreparedExperience(experience, learner.n_step, learner.gamma)
    learner.learn_from(prepared)
    trainer.fit(learner, datamodule=prepared)
    return clock.updates_per_s()


def with_compiled_losses(learner):
    """A copy of ``learner`` that compiles its losses when training starts (``compile_losses``)."""
    learner = copy.deepcopy(learner)
    learner.compile_losses = True
    return learner


def bare_updates_per_s(learner, experience: list[TensorDict], fused: bool = True) -> float:
    """The algorithm's own ``update`` on the same networks and replay, without Lightning:
    plain ``torch.optim`` optimizers and ``loss.backward()`` stand in for the Trainer's.
    ``fused=False`` swaps the learner's fused Adam for torch's default (foreach) one."""
    replay = UniformReplay(100_000)
    optimizers = learner.make_optimizers()
    if not fused:
        optimizers = [type(optimizer)([{**group, "fused": None} for group in optimizer.param_groups])
                      for optimizer in optimizers]
    without_trainer(learner, optimizers)
    start = start_steps = None
    for index, batch in enumerate(experience):
        replay.extend(nstep_transitions(batch, learner.n_step, learner.gamma))
        for _ in range(batch.numel()):
            learner.update(replay.sample(learner.batch_size))
            learner.learner_steps += 1
            if learner.learner_steps % learner.target_update_period == 0:
                learner.update_targets()
        if index == 0:
            start, start_steps = time.perf_counter(), learner.learner_steps
    return (learner.learner_steps - start_steps) / (time.perf_counter() - start)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench learner", description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=["auto"], default=None,
                        help="auto: does trainer.precision=auto pick the faster of 32-true and bf16-mixed here?")
    parser.add_argument("--algos", nargs="+", default=None, choices=["td3", "sac", "dqn"],
                        help="default td3 sac dqn; auto: td3")
    parser.add_argument("--env-shape", choices=sorted(ENV_SHAPES), default="halfcheetah",
                        help="observation and action sizes of td3 and sac (dqn: CartPole's)")
    parser.add_argument("--peer", choices=["sb3", "none"], default="sb3",
                        help="sb3: also time Stable-Baselines3's train() at the same shapes")
    parser.add_argument("--hidden", type=int, nargs="+", default=None,
                        help="hidden widths (default 64 256; --precision auto: 2048 64)")
    parser.add_argument("--layers", type=int, default=None, help="policy hidden layers (default 2; auto: 3)")
    parser.add_argument("--critic-hidden", type=int, default=None,
                        help="TD3 critics' width (default: --hidden; auto: 256)")
    parser.add_argument("--batch-size", type=int, default=None, help="default 256; auto: 64")
    parser.add_argument("--batches", type=int, default=None, help="experience batches (first is warm-up; default 6, "
                        "auto: 3)")
    parser.add_argument("--frames", type=int, default=None, help="frames (= updates) per batch (default 200; auto: 64)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--compile", action="store_true",
                        help="also time the Lightning side with compile_losses (torch.compile of the losses; "
                             "actor-critic algorithms; needs 2+ rounds, the first pays for compiling)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--out", default=None, help="JSON output ('' for none; default bench-results/learner.json, "
                        "auto: bench-results/learner-precision.json)")
    args = parser.parse_args(as_options(argv, parser))
    auto = args.precision == "auto"
    defaults = dict(algos=["td3"], hidden=[2048, 64], layers=3, critic_hidden=256, batch_size=64, batches=3,
                    frames=64, out="bench-results/learner-precision.json") if auto else dict(
        algos=["td3", "sac", "dqn"], hidden=[64, 256], layers=2, critic_hidden=None, batch_size=256, batches=6,
        frames=200, out="bench-results/learner.json")
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick:
        args.hidden, args.batches, args.frames, args.batch_size, args.rounds = [32], 3, 20, 32, 1
        args.layers, args.critic_hidden = 2, None
    if args.frames * args.batches < args.batch_size:  # the learner would wait for a batch forever
        parser.error(f"--frames x --batches ({args.frames * args.batches}) must reach --batch-size "
                     f"({args.batch_size}): the learner samples only once the replay holds one batch")
    return args


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.precision == "auto":
        return precision_main(args)
    rows = []
    for algo in args.algos:
        for hidden in args.hidden:
            learner, spec = make_learner(algo, hidden, args.batch_size, seed=0, layers=args.layers,
                                         critic_hidden=args.critic_hidden, env_shape=args.env_shape)
            experience = fake_experience(spec, args.batches, args.frames)
            peer = None if args.peer == "none" else make_sb3_peer(
                algo, learner, args.env_shape, [hidden] * args.layers, [args.critic_hidden or hidden] * 2, seed=0)
            bare = lightning = unfused = sb3 = compiled = 0.0
            compile_side = args.compile and hasattr(learner, "compile_losses")
            for _ in range(args.rounds):  # interleaved; each side keeps its best round
                bare = max(bare, bare_updates_per_s(copy.deepcopy(learner), experience))
                lightning = max(lightning, lightning_updates_per_s(copy.deepcopy(learner), experience))
                if compile_side:  # its first round pays for compiling; the best round is a compiled one
                    compiled = max(compiled, lightning_updates_per_s(with_compiled_losses(learner), experience))
                unfused = max(unfused, bare_updates_per_s(copy.deepcopy(learner), experience, fused=False))
                if peer is not None:
                    sb3 = max(sb3, sb3_updates_per_s(peer, args.frames, args.frames * (args.batches - 1)))
            row = {"algo": algo, "shape": "cartpole" if algo == "dqn" else args.env_shape, "hidden": hidden,
                   "batch": args.batch_size, "bare_updates_per_s": bare, "lightning_updates_per_s": lightning,
                   "ratio": lightning / bare, "target": TARGET_RATIO,
                   "bare_unfused_adam_updates_per_s": unfused, "fused_adam_gain": bare / unfused}
            if compile_side:
                row.update({"compiled_updates_per_s": compiled, "compile_gain": compiled / lightning})
            if peer is not None:
                row.update({"sb3_updates_per_s": sb3, "ours_vs_sb3": lightning / sb3,
                            "target_vs_sb3": TARGET_VS_SB3.get(algo)})
            rows.append(row)
    report(f"learner updates/s ({args.threads} thread(s)): Lightning vs bare PyTorch (same losses, networks, "
           "batch); fused Adam vs torch's default; ours vs SB3's train() at the same shapes", rows, args.out or None)
    return rows


def precision_main(args: argparse.Namespace) -> list[dict]:
    """``--precision auto``: each precision's updates/s under a real Trainer, and auto's pick."""
    rows = []
    for algo in args.algos:
        for hidden in args.hidden:
            learner, spec = make_learner(algo, hidden, args.batch_size, seed=0, layers=args.layers,
                                         critic_hidden=args.critic_hidden)
            experience = fake_experience(spec, args.batches, args.frames)
            started = time.perf_counter()
            timings_ms = time_updates(learner)  # what a run with trainer.precision=auto measures
            measure_s = time.perf_counter() - started
            picked, _ = choose(timings_ms)
            ups = dict.fromkeys(CANDIDATES, 0.0)
            for _ in range(args.rounds):  # interleaved; each precision keeps its best round
                for precision in CANDIDATES:
                    ups[precision] = max(ups[precision],
                                         lightning_updates_per_s(copy.deepcopy(learner), experience, precision))
            faster = max(ups, key=ups.__getitem__)
            rows.append({"algo": algo, "hidden": f"{hidden}x{args.layers}", "batch": args.batch_size,
                         "fp32_updates_per_s": ups["32-true"], "bf16_updates_per_s": ups["bf16-mixed"],
                         "faster": faster, "auto_pick": picked, "auto_vs_faster": ups[picked] / ups[faster],
                         "target": TARGET_AUTO, "auto_fp32_ms": timings_ms["32-true"],
                         "auto_bf16_ms": timings_ms["bf16-mixed"], "auto_measure_s": measure_s})
    report("learner updates/s under a Trainer: 32-true vs bf16-mixed, and trainer.precision=auto's pick",
           rows, args.out or None)
    return rows


if __name__ == "__main__":
    main()
