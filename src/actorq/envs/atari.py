"""Atari games from ale-py's own vectorized env: C++ threads step the emulators and do the
standard preprocessing, and observations come out as stacked uint8 frames ``[envs, 4, 84, 84]``.

The preprocessing is the one SB3's ``AtariWrapper`` and CleanRL's ``ppo_atari`` use: up to 30
no-ops at reset, the action repeated for 4 frames with the last two max-pooled, 84x84
grayscale, 4 frames stacked, FIRE at reset where the game needs it; for training also a life
lost ends the episode for the learner (the game goes on) and rewards are clipped to their
sign. Sticky actions are off (``repeat_action_probability=0``, as those two use the
``NoFrameskip-v4`` games); ``sticky=True`` gives the v5 games' 0.25. Evaluation plays whole
games and reports the raw score.

Needs the ``atari`` extra (``pip install -e ".[atari]"``): ale-py's wheels ship the ROMs.

Example:
    >>> env = make_atari("breakout", num_envs=2, seed=0)
    >>> frames, _ = env.reset(seed=0)
    >>> frames.shape, frames.dtype, int(env.single_action_space.n)
    ((2, 4, 84, 84), dtype('uint8'), 4)
    >>> env.close()
"""

from __future__ import annotations

from typing import Any

from actorq.util.errors import ConfigError

TRAINING = {"noop_max": 30, "frameskip": 4, "maxpool": True, "img_height": 84, "img_width": 84,
            "grayscale": True, "stack_num": 4, "use_fire_reset": True, "episodic_life": True,
            "reward_clipping": True}
"""ale-py vector env options for training (SB3's ``AtariWrapper``, CleanRL's ``ppo_atari``)."""

EVALUATION = {**TRAINING, "episodic_life": False, "reward_clipping": False}
"""The same for evaluation: whole games, raw scores."""

STICKY_ACTION_PROBABILITY = 0.25
"""The v5 games' ``repeat_action_probability``, with ``sticky=True``."""


def make_atari(game: str, num_envs: int, seed: int | None = None, training: bool = True, sticky: bool = False,
               num_threads: int = 1) -> Any:
    """ale-py's ``AtariVectorEnv`` for ``game`` (a ROM name: ``"breakout"``, ``"pong"``) with
    :data:`TRAINING` or :data:`EVALUATION` preprocessing.

    Args:
        game: the ROM, lower case as ale-py names it.
        num_envs: emulators stepped together.
        seed: seeds the emulators at the first reset (``None``: ale-py's own).
        training: episodic life and clipped rewards (``False``: whole games, raw scores).
        sticky: repeat the previous action with probability 0.25 (v5), else never.
        num_threads: the env's C++ threads (1 for an actor pinned to one core).
    """
    try:
        from ale_py import roms
        from ale_py.vector_env import AtariVectorEnv
    except ImportError as error:
        raise ConfigError('Atari needs ale-py: pip install -e ".[atari]"') from error
    known = roms.get_all_rom_ids()
    if game not in known:
        raise ConfigError(f"unknown Atari game {game!r}; ale-py has {len(known)}, e.g. breakout, pong")
    options = TRAINING if training else EVALUATION
    env = AtariVectorEnv(game, num_envs, num_threads=num_threads,
                         repeat_action_probability=STICKY_ACTION_PROBABILITY if sticky else 0.0, **options)
    if seed is not None:
        env.reset(seed=seed)
    return env
