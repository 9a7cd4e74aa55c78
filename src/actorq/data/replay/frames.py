"""A replay of stacked-frame observations that stores each frame once and stacks on sampling
(as Dopamine's and SB3's ``optimize_memory_usage`` replays do): 1M Atari transitions take
1M 84x84 uint8 frames, 7.1 GB, where storing both stacked observations of each would take 56 GB
of uint8 (four times that as float32).

It is the replay an off-policy learner gets for an env that shows stacked uint8 frames
(:func:`actorq.data.replay.make_replay` picks it): the writer hands it the actors' batches
whole, and a sample holds one-step transitions with ``discount = gamma * (1 - terminated)``.

Each env's steps go into a ring of its own, one slot per step: the newest frame of the step's
observation, its action, reward and ends, and how many steps into its episode it is. A slot's
observation is the newest frames of the slots before it, zeros before its episode's first (what
ale-py's stacking shows after a reset), and its next observation is the next slot's. When an
episode ends, one more slot holds the newest frame of the final observation, so a terminated or
truncated step's next observation is exact too; that slot starts no transition.

Within a batch the steps of a row follow each other; between batches the replay checks it. An
env's ring takes one batch row of one worker (as the ``"worker"`` record says), so each batch's
first observation there should be the one the ring's last step led to: that step's next
observation (the last batch's), or an episode's first after an end. Where it is not (a batch
was dropped, a worker restarted, rows of two workers share a ring because the batches name no
worker), the ring's stream ends there and a new one starts, so that no stack mixes the two:
the waiting last step gets a final-frame slot with the next frame it saw (its transition exact,
and not an episode's end), and the new first observation's older frames, from its first
non-blank one, go into prefix slots that start no transition, so that its step's stack is read
back exactly (:attr:`FrameReplay.stream_breaks` counts these). The check costs one comparison
of a stack per row and batch.

Example:
    >>> from tensordict import TensorDict
    >>> envs, steps = 2, 5
    >>> frames = torch.randint(0, 256, (envs, steps + 1, 84, 84), dtype=torch.uint8)
    >>> def stacks(t):  # what the env shows at step t: the last 4 frames, zeros before the first
    ...     out = torch.zeros(envs, 4, 84, 84, dtype=torch.uint8)
    ...     for k in range(4):
    ...         if t - 3 + k >= 0:
    ...             out[:, k] = frames[:, t - 3 + k]
    ...     return out
    >>> no = torch.zeros(envs, steps, 1, dtype=torch.bool)
    >>> batch = TensorDict({"observation": torch.stack([stacks(t) for t in range(steps)], 1),
    ...     "action": torch.zeros(envs, steps, dtype=torch.int64),
    ...     "next": {"observation": torch.stack([stacks(t + 1) for t in range(steps)], 1),
    ...              "reward": torch.ones(envs, steps, 1), "terminated": no, "done": no}},
    ...     batch_size=[envs, steps])
    >>> replay = FrameReplay(capacity=100, envs=envs)
    >>> replay.extend(batch)
    >>> len(replay)  # each env's last step waits for its next observation's frame
    8
    >>> sample = replay.sample(4).batch
    >>> sample["observation"].shape, sample["observation"].dtype
    (torch.Size([4, 4, 84, 84]), torch.uint8)
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from actorq.algos.batches import Sample
from actorq.data.replay.base import ReplayBuffer

FINAL = -1
"""The episode step of a slot that holds an episode's final frame (or the frame a stream ended on)."""
PREFIX = -2
"""The episode step of a slot that holds an older frame of a stream's first observation."""


class FrameReplay(ReplayBuffer):
    """Uniform replay of transitions whose observations are stacks of ``stack`` frames.

    Args:
        capacity: slots in all (split evenly among the envs); a slot is a step, the final
            frame of an episode, or an older frame of a stream's first observation.
        envs: the envs whose steps it keeps, each in a ring of its own: every actor worker's
            (a batch row of worker ``w``, as its ``"worker"`` record says, is that worker's env).
        frame_shape: one frame's shape.
        stack: frames per observation (the env's own stacking, oldest first).
        gamma: the discount a sampled transition carries (``gamma`` unless it terminated).
        seed: seeds the sampling generator.
    """

    takes_batches = True
    """The writer hands it the actors' batches ``[envs, T]`` whole (it stacks the frames itself)."""

    def __init__(self, capacity: int, envs: int, frame_shape: tuple[int, ...] = (84, 84), stack: int = 4,
                 gamma: float = 0.99, seed: int = 0):
        if envs < 1 or capacity < envs * (stack + 2):
            raise ValueError(f"a frame replay needs at least {stack + 2} slots per env; got capacity {capacity} "
                             f"for {envs} envs")
        self.capacity, self.gamma = capacity, gamma
        self._rng = np.random.default_rng(seed)
        self._rings: dict[tuple[int, int], int] = {}  # (worker, batch row) -> the env's ring
        self.envs, self.stack, self.frame_shape = envs, stack, tuple(frame_shape)
        self.slots = capacity // envs
        self.frames = np.zeros((envs, self.slots, *frame_shape), dtype=np.uint8)
        self.episode_step = np.zeros((envs, self.slots), dtype=np.int64)  # FINAL, PREFIX: no step
        self.action = np.zeros((envs, self.slots), dtype=np.int64)
        self.reward = np.zeros((envs, self.slots), dtype=np.float32)
        self.terminated = np.zeros((envs, self.slots), dtype=bool)
        self.done = np.zeros((envs, self.slots), dtype=bool)
        self.written = np.zeros(envs, dtype=np.int64)  # slots written so far, per env (not wrapped)
        self._next_step = np.zeros(envs, dtype=np.int64)  # the next slot's step within its episode
        self._last_next_frame = np.zeros((envs, *frame_shape), dtype=np.uint8)  # of the last batch's last step
        self.stream_breaks = 0
        """Batches whose first observation did not go on from what their env's ring held (a
        dropped batch, a restarted worker): each started a new stream there."""

    @property
    def nbytes(self) -> int:
        """Bytes the stored slots take."""
        return sum(array.nbytes for array in (self.frames, self.episode_step, self.action, self.reward,
                                              self.terminated, self.done))

    def extend(self, batch: TensorDictBase) -> None:
        """Stores a collector batch ``[rows, T]`` (``observation`` ``[rows, T, stack, *frame]``
        uint8, ``action``, and ``next``'s ``observation``, ``reward``, ``terminated``, ``done``;
        with a ``"worker"`` record, rows of different workers are different envs; a batch
        ``[T]`` is one env's)."""
        if batch.ndim == 1:
            batch = batch.unsqueeze(0)
        if batch.ndim != 2 or batch.shape[0] > self.envs:
            raise ValueError(f"expected a batch [envs <= {self.envs}, T], got {list(batch.shape)}")
        rings = self._rings_of(batch)
        observation = batch["observation"].numpy()
        final = batch["next", "observation"][:, :, -1].numpy()
        action = batch["action"].reshape(batch.shape).numpy()
        reward = batch["next", "reward"].reshape(batch.shape).numpy()
        terminated = batch["next", "terminated"].reshape(batch.shape).numpy()
        done = batch["next", "done"].reshape(batch.shape).numpy()
        for row, env in enumerate(rings):
            if not self._continues(env, observation[row, 0]):
                self._start_stream(env, observation[row, 0])
            for t in range(batch.shape[1]):
                self._write(env, observation[row, t, -1], self._next_step[env], action[row, t], reward[row, t],
                            terminated[row, t], done[row, t])
                if done[row, t]:  # the final observation's newest frame; the next step starts an episode
                    self._write(env, final[row, t], FINAL, 0, 0.0, False, False)
                    self._next_step[env] = 0
            self._last_next_frame[env] = final[row, -1]

    def _rings_of(self, batch: TensorDictBase) -> list[int]:
        """The ring of each row of ``batch``: one per (worker, row), given out as they first come."""
        workers = (batch["worker"][:, 0].tolist() if "worker" in batch.keys() else [0] * batch.shape[0])
        rings = []
        for row, worker in enumerate(workers):
            key = (int(worker), row)
            if key not in self._rings:
                if len(self._rings) == self.envs:
                    raise ValueError(f"a frame replay for {self.envs} envs got a batch from a further env "
                                     f"(worker {worker}, row {row})")
                self._rings[key] = len(self._rings)
            rings.append(self._rings[key])
        return rings

    def _waiting(self, env: int) -> bool:
        """Whether env ``env``'s last slot is a step still waiting for its next frame."""
        return bool(self.written[env]) and self.episode_step[env, (self.written[env] - 1) % self.slots] >= 0

    def _continues(self, env: int, observation: np.ndarray) -> bool:
        """Whether ``observation`` (a batch's first) is the one env ``env``'s ring shows next: its
        waiting step's next observation, else (after an episode's end, or in an empty ring) an
        episode's first, zeros before its newest frame."""
        if not self._waiting(env):
            return not observation[:-1].any()
        expected = np.zeros_like(observation)
        expected[-1] = self._last_next_frame[env]
        for back in range(1, min(self.stack - 1, int(self._next_step[env])) + 1):
            expected[-1 - back] = self.frames[env, (self.written[env] - back) % self.slots]
        return np.array_equal(observation, expected)

    def _start_stream(self, env: int, observation: np.ndarray) -> None:
        """Starts a new stream in env ``env``'s ring at ``observation``, one that does not go on
        from what the ring holds: ends its waiting step with the next observation it saw (the
        last batch's), then writes the observation's older frames as a prefix (those after its
        leading blank ones), so that its step's stack is read back exactly."""
        self.stream_breaks += 1
        if self._waiting(env):
            self._write(env, self._last_next_frame[env], FINAL, 0, 0.0, False, False)
        older = observation[:-1]
        blank = next((k for k, frame in enumerate(older) if frame.any()), len(older))
        for frame in older[blank:]:
            self._write(env, frame, PREFIX, 0, 0.0, False, False)
        self._next_step[env] = len(older) - blank

    def _write(self, env: int, frame: np.ndarray, episode_step: int, action, reward, terminated, done) -> None:
        slot = self.written[env] % self.slots
        self.frames[env, slot] = frame
        self.episode_step[env, slot] = episode_step
        self.action[env, slot], self.reward[env, slot] = action, reward
        self.terminated[env, slot], self.done[env, slot] = terminated, done
        self.written[env] += 1
        if episode_step >= 0:
            self._next_step[env] = episode_step + 1

    def windows(self) -> np.ndarray:
        """Per env, ``[first, end)``: the absolute slots that may start a transition (their stack
        is still in the ring, their next slot is written); final frames and prefixes among them
        start none."""
        first = np.maximum(0, self.written - self.slots + self.stack - 1)  # older stacks are overwritten
        return np.stack([first, np.maximum(first, self.written - 1)], axis=1)

    def starts(self) -> list[np.ndarray]:
        """Per env, the absolute slot numbers that start a sampleable transition: a step (not
        a final frame or a stream's prefix) in its env's :meth:`windows`."""
        starts = []
        for env, (first, end) in enumerate(self.windows()):
            candidates = np.arange(first, end)
            starts.append(candidates[self.episode_step[env, candidates % self.slots] >= 0])
        return starts

    def __len__(self) -> int:
        total = 0
        for env, (first, end) in enumerate(self.windows()):
            finals = 0  # slots of no step in the window: the ring's slots of [first, end), in at most two runs
            for low, high in self._ring_runs(first, end):
                finals += int(np.count_nonzero(self.episode_step[env, low:high] < 0))
            total += int(end - first) - finals
        return total

    def _ring_runs(self, first: int, end: int) -> list[tuple[int, int]]:
        """The ring indices of absolute slots ``[first, end)`` as at most two ``[low, high)`` runs."""
        if end <= first:
            return []
        low, high = first % self.slots, end % self.slots or self.slots
        return [(low, high)] if low < high else [(low, self.slots), (0, high)]

    def sample(self, batch_size: int, generator: np.random.Generator | None = None) -> Sample:
        """``batch_size`` transitions drawn uniformly (:meth:`draw`, with the replay's own
        generator unless one is given): ``observation`` and ``next_observation``
        ``[batch_size, stack, *frame]`` uint8, ``action``, ``reward``, ``discount``,
        ``terminated``, ``done``; weights all ones."""
        env, slot = self.draw(batch_size, generator or self._rng)
        indices = torch.from_numpy(env * self.slots + slot % self.slots)
        return Sample(self.transitions(env, slot), indices, torch.ones(batch_size))

    def observations(self, count: int) -> torch.Tensor:
        """``count`` stored observations drawn uniformly without replacement (every one when the
        replay holds ``count`` or fewer), the sampling generator untouched (for calibrating the
        actors' int8 copy, and the held-out set beside it)."""
        if getattr(self, "_peek_generator", None) is None:
            self._peek_generator = torch.Generator().manual_seed(len(self))
        rng = np.random.default_rng(int(torch.randint(2**31, (1,), generator=self._peek_generator)))
        if count >= len(self):
            starts = self.starts()
            env = np.concatenate([np.full(len(slots), index) for index, slots in enumerate(starts)])
            return self.transitions(env, np.concatenate(starts))["observation"]
        drawn: dict[tuple[int, int], None] = {}
        while len(drawn) < count:  # a few draws again, at most: count is far below the replay's size
            env, slot = self.draw(count - len(drawn), rng)
            drawn.update(dict.fromkeys(zip(env.tolist(), slot.tolist())))
        env, slot = (np.array(values) for values in zip(*drawn))
        return self.transitions(env, slot)["observation"]

    def state_dict(self) -> dict:
        """The sampling generator's state (the frames are not kept across a checkpoint)."""
        return {"rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        if "rng" in state:
            self._rng.bit_generator.state = state["rng"]

    def draw(self, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``size`` (env, absolute slot) pairs, uniform over the stored transitions: each draw
        picks a slot uniformly among every env's window and draws again where it hit a slot of
        no step (a final frame, one per episode, or a stream's prefix, a few per stream; so few
        draws repeat), at a cost that grows with ``size``, not with the capacity."""
        windows = self.windows()
        widths = windows[:, 1] - windows[:, 0]
        if widths.sum() == 0 or len(self) == 0:
            raise ValueError("the frame replay holds no complete transition yet")
        env, slot = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
        todo = np.arange(size)
        while len(todo):
            picks = rng.integers(0, widths.sum(), size=len(todo))
            env[todo] = np.searchsorted(np.cumsum(widths), picks, side="right")
            slot[todo] = windows[env[todo], 0] + picks - (np.cumsum(widths) - widths)[env[todo]]
            todo = todo[self.episode_step[env[todo], slot[todo] % self.slots] < 0]  # no step: again
        return env, slot

    def transitions(self, env: np.ndarray, slot: np.ndarray) -> TensorDict:
        """The transitions that start at absolute slots ``slot`` of envs ``env`` (see
        :meth:`starts`)."""
        terminated = self.terminated[env, slot % self.slots]
        return TensorDict({
            "observation": torch.from_numpy(self._stacks(env, slot)),
            "next_observation": torch.from_numpy(self._stacks(env, slot + 1)),
            "action": torch.from_numpy(self.action[env, slot % self.slots]),
            "reward": torch.from_numpy(self.reward[env, slot % self.slots]),
            "discount": torch.from_numpy(np.where(terminated, 0.0, self.gamma).astype(np.float32)),
            "terminated": torch.from_numpy(terminated),
            "done": torch.from_numpy(self.done[env, slot % self.slots]),
        }, batch_size=[len(slot)])

    def _stacks(self, env: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """The observations of absolute slots ``slot`` of envs ``env``: each slot's newest frame
        and the ``stack - 1`` before it in its episode (a stream's prefix counts as its earlier
        steps), zeros before the episode's first."""
        out = np.zeros((len(slot), self.stack, *self.frame_shape), dtype=np.uint8)
        steps = self.episode_step[env, slot % self.slots]
        steps = np.where(steps >= 0, steps, self.episode_step[env, (slot - 1) % self.slots] + 1)  # a final frame
        for back in range(self.stack):
            present = back <= steps
            out[present, self.stack - 1 - back] = self.frames[env[present], (slot[present] - back) % self.slots]
        return out
