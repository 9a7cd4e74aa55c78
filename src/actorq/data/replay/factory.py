"""One entry point for the ``replay`` config group: uniform, prioritized or shared replay.

Example:
    >>> replay = make_replay(capacity=1000, prioritized=True, beta_annealing_steps=500)
    >>> type(replay).__name__, replay.beta
    ('PrioritizedReplay', 0.4)

The ``replay.*`` keys are checked with the run config (:mod:`actorq.run.checks`); the buffers
check the values they cannot work with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

import psutil
import torch
from tensordict import TensorDictBase

from actorq.data.nstep import nstep_transitions
from actorq.data.replay.base import ReplayBuffer
from actorq.data.replay.frames import FrameReplay
from actorq.data.replay.prioritized import PrioritizedReplay
from actorq.data.replay.shared import SharedReplay
from actorq.data.replay.uniform import UniformReplay
from actorq.util.errors import ConfigError

if TYPE_CHECKING:
    from torchrl.envs import EnvBase


def make_replay(
    capacity: int,
    prioritized: bool = False,
    shared: bool = False,
    alpha: float = 0.6,
    beta: float = 0.4,
    beta_annealing_steps: int | None = None,
    fanout: int = 16,
    eps: float = 1e-6,
    seed: int = 0,
    template: TensorDictBase | None = None,
    planned_updates: int | None = None,
    checkpoint: bool = False,
    envs: int = 1,
    gamma: float = 0.99,
) -> ReplayBuffer:
    """Builds the replay buffer the config asks for.

    - neither flag: :class:`~actorq.data.replay.uniform.UniformReplay`;
    - ``prioritized``: :class:`~actorq.data.replay.prioritized.PrioritizedReplay`;
    - ``prioritized`` and ``shared``: :class:`~actorq.data.replay.shared.SharedReplay`;
    - ``shared`` alone: :class:`~actorq.data.replay.shared.SharedReplay` with ``alpha=0``
      (uniform sampling, all weights 1);
    - a ``template`` whose observation is stacked uint8 frames:
      :class:`~actorq.data.replay.frames.FrameReplay` (each frame stored once, uniform).

    Args:
        capacity: maximum number of transitions kept.
        prioritized: sample in proportion to priority (``|TD error|``).
        shared: keep the transitions in shared memory, written by the actor processes.
        alpha: priority exponent (prioritized only).
        beta: initial importance-sampling exponent (prioritized only).
        beta_annealing_steps: ``sample`` calls until ``beta`` reaches 1; ``None`` takes
            ``planned_updates``, so that ``beta`` reaches 1 at the end of training.
        fanout: sum-tree children per node (prioritized and shared only).
        eps: added to every priority (prioritized and shared only).
        seed: seed of the sampling generator.
        template: one transition, giving the shared buffer's keys, shapes and dtypes
            (see :func:`transition_template`); needed when ``shared``.
        planned_updates: the learner updates the run will make, each drawing one sample.
        checkpoint: checkpoints hold the transitions, priorities and write position too,
            so that a resumed run continues with the same buffer.
        envs: the envs of all actor workers (a frame replay keeps a ring for each).
        gamma: the learner's discount (a frame replay's samples carry it).

    Raises:
        ValueError: for a value the buffers cannot work with.
    """
    if template is not None and is_frames(template):
        return frame_replay(capacity, template, envs, gamma, seed, prioritized, shared, checkpoint)
    if template is not None:
        check_fits_in_memory(capacity, template)
    replay = _build_buffer(capacity, prioritized, shared, alpha, beta, beta_annealing_steps, fanout, eps, seed,
                           template, planned_updates)
    replay.save_contents = checkpoint
    return replay


def is_frames(template: TensorDictBase) -> bool:
    """Whether a transition's observation is stacked uint8 frames ``[stack, H, W]``."""
    observation = template["observation"]
    return observation.dtype == torch.uint8 and observation.ndim == 3


def frame_replay(capacity: int, template: TensorDictBase, envs: int, gamma: float, seed: int, prioritized: bool,
                 shared: bool, checkpoint: bool) -> FrameReplay:
    """The frame replay for ``template``'s frames, or a one-line refusal of what it lacks."""
    lacking = [name for name, asked in (("replay.prioritized", prioritized), ("replay.shared", shared),
                                        ("replay.checkpoint", checkpoint)) if asked]
    if lacking:
        raise ConfigError(f"a replay of frames (each stored once, uniform) has no {', '.join(lacking)}: "
                          "set it false")
    stack, *frame_shape = template["observation"].shape
    slot_bytes = math.prod(frame_shape) + FRAME_SLOT_SCALARS
    if capacity * slot_bytes > psutil.virtual_memory().total:
        raise ValueError(f"replay.capacity={capacity} needs {capacity * slot_bytes / 1e9:.1f} GB for its frames, "
                         f"more than this machine's {psutil.virtual_memory().total / 1e9:.1f} GB of memory")
    return FrameReplay(capacity, envs, tuple(frame_shape), stack, gamma=gamma, seed=seed)


FRAME_SLOT_SCALARS = 22
"""Bytes of a frame replay's slot besides its frame: step, action, reward and two flags."""


def _build_buffer(capacity, prioritized, shared, alpha, beta, beta_annealing_steps, fanout, eps, seed, template,
                  planned_updates) -> ReplayBuffer:
    """The buffer itself, from :func:`make_replay`'s arguments but ``checkpoint``."""
    if not (prioritized or shared):
        return UniformReplay(capacity, seed=seed)
    if beta_annealing_steps is None:
        if planned_updates is None:
            raise ValueError("replay.beta_annealing_steps is needed when the planned updates "
                             "are unknown")
        beta_annealing_steps = max(0, int(planned_updates))
    options = dict(alpha=alpha if prioritized else 0.0, beta=beta,
                   beta_annealing_steps=beta_annealing_steps, fanout=fanout, eps=eps, seed=seed)
    if not shared:
        return PrioritizedReplay(capacity, **options)
    if template is None:
        raise ValueError("replay.shared=true needs a transition template to allocate the storage")
    return SharedReplay(capacity, template, **options)


def check_fits_in_memory(capacity: int, template: TensorDictBase) -> None:
    """Refuses a ``capacity`` whose transitions alone would not fit in this machine's memory
    (a typo such as ``replay.capacity=1e12`` must stop the run, not swap the machine).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> check_fits_in_memory(10**15, TensorDict({"observation": torch.zeros(4)}, []))
        Traceback (most recent call last):
        ...
        ValueError: replay.capacity=1000000000000000 needs 16000000.0 GB for its transitions (16 bytes each), ...
    """
    row_bytes = sum(leaf.element_size() * leaf.numel() for leaf in template.values(True, True))
    needed, available = capacity * row_bytes, psutil.virtual_memory().total
    if needed > available:
        raise ValueError(f"replay.capacity={capacity} needs {needed / 1e9:.1f} GB for its transitions "
                         f"({row_bytes} bytes each), more than this machine's {available / 1e9:.1f} GB of memory")


def transition_template(env: EnvBase) -> TensorDictBase:
    """One all-zero transition with the keys, shapes and dtypes the replay stores for
    ``env``'s experience (as :func:`actorq.data.nstep.nstep_transitions` makes it).

    Example:
        >>> from actorq.envs import make_env
        >>> row = transition_template(make_env("CartPole-v1"))
        >>> row["observation"].shape, row["action"].dtype
        (torch.Size([4]), torch.int64)
    """
    step = env.fake_tensordict().unsqueeze(-1)  # one time step
    return nstep_transitions(step, n=1, gamma=1.0)[0]
