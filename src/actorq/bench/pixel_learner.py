"""How many frames per second a PPO learner on Atari frames consumes: the other side of the
actor fleet's cost (``actorq bench fleet``), on this machine's CPU or GPU.

``actorq bench pixel_learner [--trunks nature impala] [--devices cpu cuda] [--precisions fp32
bf16] [--layouts default channels-last] [--rollouts 3] [--threads N] [--check-learner] [--quick]
[--out FILE.json]``

One rollout is ``ppo_breakout``'s: 8 envs x 128 steps of uint8 frames ``[4, 84, 84]``, trained
on for 4 epochs of 4 minibatches of 256. Timed per rollout, as the learner spends it: the
frames copied to the device, the pass that computes ``pi_prox``'s log-probabilities and the
value of every frame (and of the next frame only at each env's last step, as the learner does),
and the 16 updates (forward, the clipped surrogate, value
and entropy losses, backward, gradient-norm clip, Adam). The networks are actorq's
(:func:`actorq.algos.ppo.pixel_actor_critic`'s trunk and heads); the update is
:func:`ppo_update`, the arithmetic of :meth:`actorq.algos.ppo.PPO._loss` without the learner's
bookkeeping, so that it runs where only torch is installed (a GPU machine). ``--check-learner``
also times the real learner (:meth:`~actorq.algos.ppo.PPO.update_rollout`) on the CPU and
prints the two side by side. ``bf16`` runs the updates under bf16 autocast; ``channels-last``
lays the convolutions' activations (and weights) out channels-last, as ``trainer.precision=auto``
may choose for the real learner (:mod:`actorq.util.memory_format`).

Columns: ``learner_fps`` (frames of rollout consumed per second: what the actors must feed),
``ms_per_rollout``, and the device.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import time

import torch
from torch import nn

from actorq.algos.conv import make_trunk
from actorq.bench._table import report, write_json
from actorq.util.arguments import as_options
from actorq.util.memory_format import set_channels_last

FRAME_SHAPE = (4, 84, 84)
ENVS, STEPS, EPOCHS, MINIBATCHES, ACTIONS = 8, 128, 4, 4, 4
CLIP, VALUE_COEF, ENTROPY_COEF, MAX_GRAD_NORM, LR = 0.1, 0.5, 0.01, 0.5, 2.5e-4
VALUE_CHUNK = 64  # actorq.algos.ppo.VALUE_CHUNK, not imported: this loop runs where only torch is


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq bench pixel_learner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trunks", nargs="+", default=["nature", "impala"], choices=["nature", "impala"])
    parser.add_argument("--devices", nargs="+", default=None, help="cpu, cuda (default: cpu, and cuda if present)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--layouts", nargs="+", default=["default", "channels-last"],
                        choices=["default", "channels-last"], help="activation layouts of the convolutions")
    parser.add_argument("--rollouts", type=int, default=3, help="timed rollouts per row (after one warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--check-learner", action="store_true",
                        help="also time actorq's PPO learner itself on the CPU, beside the update loop")
    parser.add_argument("--quick", action="store_true", help="one trunk, one timed rollout: a smoke run")
    parser.add_argument("--out", default="bench-results/pixel_learner.json")
    args = parser.parse_args(as_options(argv, parser))
    if args.devices is None:
        args.devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    if args.quick:
        args.trunks, args.rollouts, args.precisions, args.layouts = args.trunks[:1], 1, args.precisions[:1], args.layouts[:1]
    return args


class ActorCritic(nn.Module):
    """The shared-trunk policy and value of ``ppo_breakout`` (trunk, policy head, value head)."""

    def __init__(self, trunk: str):
        super().__init__()
        self.trunk = make_trunk(trunk, FRAME_SHAPE)
        self.policy = nn.Linear(self.trunk.features, ACTIONS)
        self.value = nn.Linear(self.trunk.features, 1)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.trunk(frames)
        return self.policy(hidden), self.value(hidden).squeeze(-1)


def synthetic_rollout(generator: torch.Generator) -> dict[str, torch.Tensor]:
    """One rollout's tensors as the actors hand them over (frames uint8, on the CPU)."""
    count = ENVS * STEPS
    return {"observation": torch.randint(0, 256, (count, *FRAME_SHAPE), dtype=torch.uint8, generator=generator),
            "next_observation": torch.randint(0, 256, (count, *FRAME_SHAPE), dtype=torch.uint8, generator=generator),
            "action": torch.randint(0, ACTIONS, (count,), generator=generator),
            "reward": torch.randn(count, generator=generator), "log_prob": torch.full((count,), -math.log(ACTIONS))}


def ppo_update(model: ActorCritic, optimizer: torch.optim.Optimizer, rollout: dict[str, torch.Tensor],
               device: torch.device, autocast: contextlib.AbstractContextManager, channels_last: bool) -> None:
    """One rollout's training: copy, the values pass (every frame's value, and the next frame's
    only at each env's last step, as :meth:`actorq.algos.ppo.PPO.prepare` computes them; on a
    CPU in chunks of :data:`VALUE_CHUNK` frames), 16 updates."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    data = {name: tensor.to(device, non_blocking=True) for name, tensor in rollout.items()}
    for name in ("observation", "next_observation"):
        data[name] = data[name].contiguous(memory_format=memory_format)
    with torch.no_grad(), autocast:
        chunk = VALUE_CHUNK if device.type == "cpu" else len(data["observation"])
        parts = [model(frames) for frames in data["observation"].split(chunk)]
        logits, value = torch.cat([part[0] for part in parts]), torch.cat([part[1] for part in parts])
        next_value = torch.cat([value[1:], value[:1]])  # frames are [env, step] in order: s_{t+1}'s value
        next_value[STEPS - 1::STEPS] = model(data["next_observation"][STEPS - 1::STEPS])[1]  # each env's last step
        prox_log_prob = torch.log_softmax(logits.float(), -1).gather(-1, data["action"][:, None]).squeeze(-1)
        advantage = data["reward"] + 0.99 * next_value.float() - value.float()  # stands in for GAE's pass
        returns = advantage + value.float()
    rows = len(advantage)
    for _ in range(EPOCHS):
        for index in torch.randperm(rows, device=device).split(rows // MINIBATCHES):
            with autocast:
                logits, value = model(data["observation"][index])
            log_probs = torch.log_softmax(logits.float(), -1)
            log_prob = log_probs.gather(-1, data["action"][index][:, None]).squeeze(-1)
            ratio = (log_prob - prox_log_prob[index]).exp()
            adv = advantage[index]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            surrogate = torch.min(ratio * adv, ratio.clamp(1 - CLIP, 1 + CLIP) * adv)
            entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
            loss = (-surrogate.mean() + VALUE_COEF * (returns[index] - value.float()).pow(2).mean()
                    - ENTROPY_COEF * entropy)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            optimizer.step()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_update_loop(trunk: str, device_name: str, precision: str, rollouts: int, channels_last: bool = False) -> float:
    """Seconds per rollout of :func:`ppo_update` (the best of ``rollouts``, after one warm-up)."""
    device = torch.device(device_name)
    torch.manual_seed(0)
    model = ActorCritic(trunk).to(device)
    if channels_last:
        model = set_channels_last(model.to(memory_format=torch.channels_last), True)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, eps=1e-5)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    generator = torch.Generator().manual_seed(0)
    data = [synthetic_rollout(generator) for _ in range(2)]
    if device.type == "cuda":
        data = [{name: tensor.pin_memory() for name, tensor in rollout.items()} for rollout in data]
    seconds = []
    for i in range(rollouts + 1):
        _synchronize(device)
        started = time.perf_counter()
        ppo_update(model, optimizer, data[i % 2], device, autocast, channels_last)
        _synchronize(device)
        seconds.append(time.perf_counter() - started)
    return min(seconds[1:])  # the best rollout: what the update costs when nothing else runs


def time_real_learner(trunk: str, rollouts: int, precision: str = "fp32", channels_last: bool = False) -> float:
    """Seconds per rollout of actorq's own PPO learner (``update_rollout``) on the CPU, with
    ``ppo_breakout``'s settings, its updates under bf16 autocast with ``precision="bf16"``
    (what ``trainer.precision=bf16-mixed`` runs), its trunk channels-last with ``channels_last``."""
    from tensordict import TensorDict

    from actorq.algos.ppo import PPO
    from actorq.envs import EnvSpec
    from actorq.run.learner_precision import without_trainer

    spec = EnvSpec(obs_dim=math.prod(FRAME_SHAPE), discrete=True, num_actions=ACTIONS, frame_shape=FRAME_SHAPE)
    torch.manual_seed(0)
    learner = PPO(spec, pixel_trunk=trunk, lr=LR, epochs=EPOCHS, minibatch_size=ENVS * STEPS // MINIBATCHES,
                  clip_range=CLIP, entropy_coef=ENTROPY_COEF, max_grad_norm=MAX_GRAD_NORM)
    set_channels_last(learner, channels_last)
    without_trainer(learner, learner.make_optimizers())

    def rollout(tensors: dict[str, torch.Tensor]) -> TensorDict:
        def shaped(tensor):
            return tensor.reshape(ENVS, STEPS, *tensor.shape[1:])

        ended = torch.zeros(ENVS, STEPS, 1, dtype=torch.bool)
        return TensorDict({"observation": shaped(tensors["observation"]), "action": shaped(tensors["action"]),
                           "log_prob": shaped(tensors["log_prob"]),
                           "next": {"observation": shaped(tensors["next_observation"]),
                                    "reward": shaped(tensors["reward"])[..., None], "terminated": ended,
                                    "done": ended.clone()}}, batch_size=[ENVS, STEPS])

    generator = torch.Generator().manual_seed(0)
    data = [rollout(synthetic_rollout(generator)) for _ in range(2)]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    seconds = []
    for i in range(rollouts + 1):
        started = time.perf_counter()
        with autocast:
            learner.update_rollout(data[i % 2])
        seconds.append(time.perf_counter() - started)
    return min(seconds[1:])  # the best rollout: what the update costs when nothing else runs


def device_label(device_name: str) -> str:
    if device_name == "cuda":
        return torch.cuda.get_device_name()
    return f"cpu, {torch.get_num_threads()} threads"


def measure(args: argparse.Namespace) -> list[dict]:
    if args.threads:
        torch.set_num_threads(args.threads)
    frames = ENVS * STEPS
    rows = []
    for device in args.devices:
        for trunk in args.trunks:
            for precision, layout in itertools.product(args.precisions, args.layouts):
                seconds = time_update_loop(trunk, device, precision, args.rollouts, layout == "channels-last")
                rows.append({"trunk": trunk, "device": device_label(device), "precision": precision, "layout": layout,
                             "what": "update loop", "ms_per_rollout": 1e3 * seconds, "learner_fps": frames / seconds})
            checks = itertools.product(args.precisions, args.layouts) if args.check_learner and device == "cpu" else ()
            for precision, layout in checks:
                seconds = time_real_learner(trunk, args.rollouts, precision, layout == "channels-last")
                rows.append({"trunk": trunk, "device": device_label(device), "precision": precision, "layout": layout,
                             "what": "actorq PPO learner", "ms_per_rollout": 1e3 * seconds,
                             "learner_fps": frames / seconds})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    rows = measure(args)
    title = f"pixel_learner: PPO on {ENVS}x{STEPS} frames per rollout, {EPOCHS} epochs x {MINIBATCHES} minibatches"
    report(title, rows, out=None)
    if args.out:
        write_json(title, rows, args.out)
    return rows


if __name__ == "__main__":
    main()
