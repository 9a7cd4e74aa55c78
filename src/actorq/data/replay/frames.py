"""A replay of stacked-frame observations that stores each frame once and stacks on sampling
(as Dopamine's and SB3's ``optimize_memory_usage`` replays do): 1M Atari transitions take
1M 84x84 uint8 frames, 7.1 GB, where storing both stacked observations of each would take 56 GB
of uint8 (four times that as float32).

Each env's steps go into a ring of its own, one slot per step: the newest frame of the step's
observation, its action, reward and ends, and how many steps into its episode it is. A slot's
observation is the newest frames of the slots before it, zeros before its episode's first (what
ale-py's stacking shows after a reset), and its next observation is the next slot's. When an
episode ends, one more slot holds the newest frame of the final observation, so a terminated or
truncated step's next observation is exact too; that slot starts no transition.

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
    >>> sample = replay.sample(4)
    >>> sample["observation"].shape, sample["observation"].dtype
    (torch.Size([4, 4, 84, 84]), torch.uint8)
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase


class FrameReplay:
    """Uniform replay of transitions whose observations are stacks of ``stack`` frames.

    Args:
        capacity: slots in all (split evenly among the envs); a slot is a step, or the final
            frame of an episode.
        envs: the collector batch's rows (each env keeps its own ring of slots).
        frame_shape: one frame's shape.
        stack: frames per observation (the env's own stacking, oldest first).
    """

    def __init__(self, capacity: int, envs: int, frame_shape: tuple[int, ...] = (84, 84), stack: int = 4):
        if envs < 1 or capacity < envs * (stack + 2):
            raise ValueError(f"a frame replay needs at least {stack + 2} slots per env; got capacity {capacity} "
                             f"for {envs} envs")
        self.envs, self.stack, self.frame_shape = envs, stack, tuple(frame_shape)
        self.slots = capacity // envs
        self.frames = np.zeros((envs, self.slots, *frame_shape), dtype=np.uint8)
        self.episode_step = np.zeros((envs, self.slots), dtype=np.int64)  # -1: a final frame
        self.action = np.zeros((envs, self.slots), dtype=np.int64)
        self.reward = np.zeros((envs, self.slots), dtype=np.float32)
        self.terminated = np.zeros((envs, self.slots), dtype=bool)
        self.done = np.zeros((envs, self.slots), dtype=bool)
        self.written = np.zeros(envs, dtype=np.int64)  # slots written so far, per env (not wrapped)
        self._next_step = np.zeros(envs, dtype=np.int64)  # the next slot's step within its episode

    @property
    def nbytes(self) -> int:
        """Bytes the stored slots take."""
        return sum(array.nbytes for array in (self.frames, self.episode_step, self.action, self.reward,
                                              self.terminated, self.done))

    def extend(self, batch: TensorDictBase) -> None:
        """Stores a collector batch ``[envs, T]`` (``observation`` ``[envs, T, stack, *frame]``
        uint8, ``action``, and ``next``'s ``observation``, ``reward``, ``terminated``, ``done``)."""
        if batch.shape[0] != self.envs or batch.ndim != 2:
            raise ValueError(f"expected a batch [envs={self.envs}, T], got {list(batch.shape)}")
        newest = batch["observation"][:, :, -1].numpy()
        final = batch["next", "observation"][:, :, -1].numpy()
        action = batch["action"].reshape(batch.shape).numpy()
        reward = batch["next", "reward"].reshape(batch.shape).numpy()
        terminated = batch["next", "terminated"].reshape(batch.shape).numpy()
        done = batch["next", "done"].reshape(batch.shape).numpy()
        for env in range(self.envs):
            for t in range(batch.shape[1]):
                self._write(env, newest[env, t], self._next_step[env], action[env, t], reward[env, t],
                            terminated[env, t], done[env, t])
                if done[env, t]:  # the final observation's newest frame; the next step starts an episode
                    self._write(env, final[env, t], -1, 0, 0.0, False, False)
                    self._next_step[env] = 0

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
        is still in the ring, their next slot is written); final frames among them start none."""
        first = np.maximum(0, self.written - self.slots + self.stack - 1)  # older stacks are overwritten
        return np.stack([first, np.maximum(first, self.written - 1)], axis=1)

    def starts(self) -> list[np.ndarray]:
        """Per env, the absolute slot numbers that start a sampleable transition: a step (not
        a final frame) in its env's :meth:`windows`."""
        starts = []
        for env, (first, end) in enumerate(self.windows()):
            candidates = np.arange(first, end)
            starts.append(candidates[self.episode_step[env, candidates % self.slots] >= 0])
        return starts

    def __len__(self) -> int:
        total = 0
        for env, (first, end) in enumerate(self.windows()):
            finals = 0  # final frames in the window: the ring's slots of [first, end), in at most two runs
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

    def sample(self, size: int, generator: np.random.Generator | None = None) -> TensorDict:
        """``size`` transitions drawn uniformly (:meth:`draw`): ``observation`` and
        ``next_observation`` ``[size, stack, *frame]`` uint8, ``action``, ``reward``,
        ``terminated``, ``done``."""
        return self.transitions(*self.draw(size, generator or np.random.default_rng()))

    def draw(self, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``size`` (env, absolute slot) pairs, uniform over the stored transitions: each draw
        picks a slot uniformly among every env's window and draws again where it hit a final
        frame (one per episode, so few draws repeat), at a cost that grows with ``size``, not
        with the capacity."""
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
            todo = todo[self.episode_step[env[todo], slot[todo] % self.slots] < 0]  # final frames: again
        return env, slot

    def transitions(self, env: np.ndarray, slot: np.ndarray) -> TensorDict:
        """The transitions that start at absolute slots ``slot`` of envs ``env`` (see
        :meth:`starts`)."""
        return TensorDict({
            "observation": torch.from_numpy(self._stacks(env, slot)),
            "next_observation": torch.from_numpy(self._stacks(env, slot + 1)),
            "action": torch.from_numpy(self.action[env, slot % self.slots]),
            "reward": torch.from_numpy(self.reward[env, slot % self.slots]),
            "terminated": torch.from_numpy(self.terminated[env, slot % self.slots]),
            "done": torch.from_numpy(self.done[env, slot % self.slots]),
        }, batch_size=[len(slot)])

    def _stacks(self, env: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """The observations of absolute slots ``slot`` of envs ``env``: each slot's newest frame
        and the ``stack - 1`` before it in its episode, zeros before the episode's first."""
        out = np.zeros((len(slot), self.stack, *self.frame_shape), dtype=np.uint8)
        steps = self.episode_step[env, slot % self.slots]
        steps = np.where(steps >= 0, steps, self.episode_step[env, (slot - 1) % self.slots] + 1)  # a final frame
        for back in range(self.stack):
            present = back <= steps
            out[present, self.stack - 1 - back] = self.frames[env[present], (slot[present] - back) % self.slots]
        return out
