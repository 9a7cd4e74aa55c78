"""Atari games from ale-py's own vectorized env: C++ threads step the emulators and do the
standard preprocessing, and observations come out as stacked uint8 frames ``[envs, 4, 84, 84]``.

The preprocessing is the one SB3's ``AtariWrapper`` and CleanRL's ``ppo_atari`` use: up to 30
no-ops at reset, the action repeated for 4 frames with the last two max-pooled, 84x84
grayscale, 4 frames stacked, FIRE at reset and in the step after a lost life where the game
has FIRE; for training also a life lost ends the episode for the learner (the game goes on)
and rewards are clipped to their sign. Sticky actions are off (``repeat_action_probability=0``,
as those two use the ``NoFrameskip-v4`` games); ``sticky=True`` gives the v5 games' 0.25.
Evaluation plays whole games and reports the raw score, FIRE pressed as in training: RL Zoo
evaluates through the same ``AtariWrapper`` as it trains, and scores the whole game.

The ``atari`` suite (``env.library: atari``) steps them as :class:`AtariEnvs` on the lean
batched path. It names a game as ale-py names its ROM (``breakout``, ``pong``: no sticky
actions) or by any of ale-py's gymnasium ids (``BreakoutNoFrameskip-v4``, ``ALE/Pong-v5``):
the id names the game, and sticky actions where its registration has them (v5, v0); the
preprocessing above is the same for every name (4 frames per action, whatever the id's
``frameskip``). ale-py registers its ids with gymnasium when it is first imported; the suite
imports it before it answers for a name gymnasium does not know, so whether an id is known
never depends on what was asked before. Its options (``env.options``, :data:`OPTIONS`) are
``sticky`` (``None``: as the name says), ``noop_max`` and ``fire_reset``.

Needs the ``atari`` extra (``pip install -e ".[atari]"``): ale-py's wheels ship the ROMs.
ale-py :data:`OLDEST_ALE_PY` or newer: older versions have no vector env (0.10), no
``autoreset_mode`` (0.11.0), crash on a partial reset (0.11.x) or deadlock in one (0.12.0).

Example:
    >>> env = make_atari("breakout", num_envs=2, seed=0)
    >>> frames, _ = env.reset(seed=0)
    >>> frames.shape, frames.dtype, int(env.single_action_space.n)
    ((2, 4, 84, 84), dtype('uint8'), 4)
    >>> env.close()
    >>> raw = AtariSuite().make_raw("breakout", 2)
    >>> raw.obs_shape, raw.obs_dtype, raw.num_actions
    ((4, 84, 84), dtype('uint8'), 4)
    >>> raw.close()
    >>> atari_game("PongNoFrameskip-v4"), atari_game("ALE/Pong-v5"), atari_game("pong"), atari_game("CartPole-v1")
    (('pong', False), ('pong', True), ('pong', False), None)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from actorq.envs.gymnasium import ALE_ENTRY_POINT
from actorq.envs.raw import RawEnvs
from actorq.envs.registry import EnvSuite, register_suite
from actorq.util.errors import ConfigError
from actorq.util.values import is_int

TRAINING = {"noop_max": 30, "frameskip": 4, "maxpool": True, "img_height": 84, "img_width": 84,
            "grayscale": True, "stack_num": 4, "use_fire_reset": True, "episodic_life": True,
            "reward_clipping": True}
"""ale-py vector env options for training (SB3's ``AtariWrapper``, CleanRL's ``ppo_atari``)."""

EVALUATION = {**TRAINING, "episodic_life": False, "reward_clipping": False}
"""The same for evaluation: whole games, raw scores."""

STICKY_ACTION_PROBABILITY = 0.25
"""The v5 games' ``repeat_action_probability``, with ``sticky=True``."""

OPTIONS = {"sticky": "true, false or null (as the name says)", "noop_max": "an integer >= 0",
           "fire_reset": "true or false"}
"""The suite's options (``env.options``), each with the values it takes: the arguments of
:class:`AtariEnvs` of those names."""

MAX_EPISODE_FRAMES = 108_000
"""Emulator frames before an episode is truncated (27,000 steps of 4 frames: 30 minutes)."""

OLDEST_ALE_PY = (0, 12, 1)
"""The oldest ale-py whose vector env restarts single games (partial resets) as this suite does."""

_SEEDS = 2**31 - 1  # ale-py takes non-negative int32 seeds
_INSTALL = 'pip install -e ".[atari]"'


def _vector_env_class() -> Any:
    """ale-py's ``AtariVectorEnv``, or a :class:`ConfigError` with the install hint (no ale-py,
    or one older than :data:`OLDEST_ALE_PY`)."""
    try:
        import ale_py
    except ImportError as error:
        raise ConfigError(f"Atari needs ale-py: {_INSTALL}") from error
    check_ale_py_version(ale_py.__version__)
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv


def check_ale_py_version(version: str) -> None:
    """Raises a :class:`ConfigError` for an ale-py older than :data:`OLDEST_ALE_PY`.

    >>> check_ale_py_version("0.12.1")
    >>> check_ale_py_version("0.11.2")
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: Atari needs ale-py 0.12.1 or newer, this is 0.11.2: pip install -e ".[atari]"
    """
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
    if release < OLDEST_ALE_PY:
        oldest = ".".join(map(str, OLDEST_ALE_PY))
        raise ConfigError(f"Atari needs ale-py {oldest} or newer, this is {version}: {_INSTALL}")


def rom_ids() -> list[str]:
    """ale-py's games (``"breakout"``, ``"pong"``, ...); empty without ale-py."""
    try:
        from ale_py import roms
    except ImportError:
        return []
    return list(roms.get_all_rom_ids())


_ROM_NAME = re.compile(r"[a-z0-9_]+")
_ATARI_ID = re.compile(r"ALE/\w+-v\d+|\w+(NoFrameskip|Deterministic)-v[04]")
"""The shape of ale-py's gymnasium ids (``ALE/Pong-v5``, ``PongNoFrameskip-v4``)."""


def ale_py_missing(env_name: str) -> str | None:
    """Why ``env_name`` names no environment here when it has the shape of an Atari id and
    ale-py is not installed (gymnasium knows Atari ids only from ale-py); ``None`` otherwise."""
    if not _ATARI_ID.fullmatch(env_name):
        return None
    try:
        import ale_py  # noqa: F401
    except ImportError:
        return f"{env_name} is an Atari game, and Atari needs ale-py: {_INSTALL}"
    return None


def register_atari_ids() -> bool:
    """Registers ale-py's gymnasium ids (``ALE/Pong-v5``, ``PongNoFrameskip-v4``, ...) with
    gymnasium, as importing ale-py does once per process; ``False`` without ale-py."""
    try:
        import ale_py
    except ImportError:
        return False
    import gymnasium

    gymnasium.register_envs(ale_py)
    return True


def atari_ids() -> list[str]:
    """ale-py's gymnasium ids; empty without ale-py."""
    import gymnasium

    if not register_atari_ids():
        return []
    return [env_id for env_id, spec in gymnasium.envs.registry.items() if spec.entry_point == ALE_ENTRY_POINT]


def atari_game(env_name: str) -> tuple[str, bool] | None:
    """``(game, sticky)`` for a ROM name (never sticky) or one of ale-py's gymnasium ids (sticky
    where its registration repeats actions), ``None`` for any other name. ale-py is imported
    only for a name that is neither in gymnasium's registry already nor a ROM name's shape."""
    import gymnasium

    spec = gymnasium.envs.registry.get(env_name)
    if spec is None and _ROM_NAME.fullmatch(env_name):
        return (env_name, False) if env_name in rom_ids() else None
    if spec is None and register_atari_ids():
        spec = gymnasium.envs.registry.get(env_name)
    if spec is None or spec.entry_point != ALE_ENTRY_POINT:
        return None
    return spec.kwargs["game"], spec.kwargs.get("repeat_action_probability", 0.0) > 0


def _check_game(game: str) -> None:
    known = rom_ids()
    if game not in known:
        raise ConfigError(f"unknown Atari game {game!r}; ale-py has {len(known)}, e.g. breakout, pong")


def make_atari(game: str, num_envs: int, seed: int | None = None, training: bool = True, sticky: bool = False,
               num_threads: int = 1) -> Any:
    """ale-py's ``AtariVectorEnv`` for ``game`` (a ROM name: ``"breakout"``, ``"pong"``) with
    :data:`TRAINING` or :data:`EVALUATION` preprocessing.

    ale-py's own ``episodic_life`` restarts the whole game after a lost life (at the next
    step, its autoreset); :class:`AtariEnvs` keeps the game going instead.

    Args:
        game: the ROM, lower case as ale-py names it.
        num_envs: emulators stepped together.
        seed: seeds the emulators at the first reset (``None``: ale-py's own).
        training: episodic life and clipped rewards (``False``: whole games, raw scores).
        sticky: repeat the previous action with probability 0.25 (v5), else never.
        num_threads: the env's C++ threads (1 for an actor pinned to one core).
    """
    vector_env = _vector_env_class()
    _check_game(game)
    options = TRAINING if training else EVALUATION
    env = vector_env(game, num_envs, num_threads=num_threads,
                     repeat_action_probability=STICKY_ACTION_PROBABILITY if sticky else 0.0, **options)
    if seed is not None:
        env.reset(seed=seed)
    return env


class AtariEnvs(RawEnvs):
    """``n`` Atari emulators in one ale-py ``AtariVectorEnv`` (one C++ thread), as raw envs.

    Observations are the stacked frames ``[4, 84, 84]`` uint8, zeros before an episode's
    first frame; actions are indices into the game's minimal action set.

    An episode that ends with the game (game over, or :data:`MAX_EPISODE_FRAMES`) restarts
    inside the step that ended it (ale-py's ``SameStep`` autoreset): the step reports the final
    observation and :meth:`reset` hands out the new game's first one, so the step after it is
    the new game's first. A life lost in training (``evaluation=False``) ends the learner's
    episode but not the game: :meth:`reset` starts the next episode from the same screen (its
    newest frame, zeros before it) and the game goes on with one life less, as SB3's
    ``EpisodicLifeEnv``. The step after a lost life presses FIRE whatever the policy chose,
    where the game has FIRE and starts with it, as SB3's ``FireResetEnv`` does in its reset
    after a lost life (SB3 hides that step and a no-op before it from the agent; ale-py's
    vector env cannot step one of its envs alone, so here the agent sees the step and its
    action is overridden). Evaluation does the same: RL Zoo evaluates through the same
    wrappers as it trains, so its evaluation games get their FIRE too.

    Args:
        game: the ROM, lower case as ale-py names it (``"breakout"``).
        n: emulators.
        evaluation: :data:`EVALUATION` preprocessing (whole games, raw scores), else :data:`TRAINING`.
        sticky: repeat the previous action with probability 0.25 (the v5 games), else never.
        noop_max: overrides the preset's random no-ops at a game's start (0: none).
        fire_reset: overrides whether a game starts with FIRE where the game has it (and so
            whether the step after a lost life presses it).
        max_episode_frames: emulator frames before an episode is truncated.
        fire_after_lost_life: overrides whether the step after a lost life presses FIRE
            (default: where the game has FIRE and starts with it, in training and evaluation).
    """

    discrete = True
    obs_dtype = np.dtype(np.uint8)

    def __init__(self, game: str, n: int, evaluation: bool = False, sticky: bool = False,
                 noop_max: int | None = None, fire_reset: bool | None = None,
                 max_episode_frames: int = MAX_EPISODE_FRAMES, fire_after_lost_life: bool | None = None):
        vector_env = _vector_env_class()
        _check_game(game)
        preset = EVALUATION if evaluation else TRAINING
        options = {**preset, "episodic_life": False, "life_loss_info": preset["episodic_life"]}
        if noop_max is not None:
            options["noop_max"] = noop_max
        if fire_reset is not None:
            options["use_fire_reset"] = fire_reset
        self.n = n
        self.evaluation = evaluation
        self.env = vector_env(game, n, num_threads=1, autoreset_mode="SameStep",
                              max_num_frames_per_episode=max_episode_frames,
                              repeat_action_probability=STICKY_ACTION_PROBABILITY if sticky else 0.0, **options)
        self.envs = (self.env,)  # what LeanBatchedEnv.close closes
        self.num_actions = int(self.env.single_action_space.n)
        self._shape = tuple(self.env.single_observation_space.shape)
        self.obs_dim = int(np.prod(self._shape))
        obs, info = self.env.reset()  # ale-py restarts single envs only after restarting all
        self._first = obs.copy()  # each env's next episode's first observation...
        self._fresh = np.ones(n, dtype=bool)  # ...while it has not been handed out by reset()
        self._age = np.ones(n, dtype=np.int64)  # frames of the current episode in the stack
        self.lives = info["lives"].astype(np.int64)
        """Each env's lives left, as the game counts them."""
        self._offset = _frame_offset(info)
        if fire_after_lost_life is None:
            fire_after_lost_life = options["use_fire_reset"]
        self._fire = _fire_action(self.env) if fire_after_lost_life else None
        """FIRE's index in the action set, pressed in the step after a lost life (``None``: never)."""
        self._lost_life = np.zeros(n, dtype=bool)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """``(4, 84, 84)``: the stacked frames, oldest first."""
        return self._shape

    def step(self, actions, obs, reward, terminated, truncated) -> None:
        actions = np.asarray(actions, dtype=np.int64).reshape(self.n)
        if self._fire is not None:
            actions = np.where(self._lost_life, self._fire, actions)
        frames, r, term, trunc, info = self.env.step(actions)
        offset = _frame_offset(info)
        restarted = offset != self._offset  # the game ended and ale-py restarted it in this step
        self._lost_life = (info["lives"] < self.lives) & ~restarted
        self.lives[:], self._offset = info["lives"], offset
        obs[:] = frames
        if restarted.any():
            obs[restarted] = info["final_obs"][restarted]
        reward[:, 0], terminated[:, 0], truncated[:, 0] = r, term, trunc
        self._age = np.minimum(self._age + 1, self._shape[0])
        self._blank_before_episode(obs)
        self._keep_first(frames, term | trunc, restarted)

    def _keep_first(self, frames: np.ndarray, ended: np.ndarray, restarted: np.ndarray) -> None:
        """The first observations of the episodes after those that ended, for :meth:`reset`."""
        self._fresh = ended
        self._first[restarted] = frames[restarted]  # the new game's, from ale-py's restart
        for i in np.flatnonzero(ended & ~restarted):  # a lost life: the same game goes on
            self._first[i] = 0
            self._first[i, -1] = frames[i, -1]

    def _blank_before_episode(self, obs: np.ndarray) -> None:
        """Zeros the frames before each episode's first (ale-py's stack goes on over a lost life)."""
        for i in np.flatnonzero(self._age < self._shape[0]):
            obs[i, : self._shape[0] - self._age[i]] = 0

    def reset(self, index, obs) -> None:
        if not self._fresh[index]:
            self._restart(index)
        obs[:] = self._first[index]
        self._fresh[index] = False
        self._age[index] = 1

    def seed(self, index, seed) -> None:
        """Restarts env ``index``'s game from ``seed``: its next episode is that seed's."""
        self._restart(index, seed)

    def _restart(self, index: int, seed: int | None = None) -> None:
        """A new game for env ``index`` (ale-py's partial reset), its first observation kept."""
        mask = np.zeros(self.n, dtype=bool)
        mask[index] = True
        seeds = None if seed is None else np.array([seed % _SEEDS])
        frames, info = self.env.reset(seed=seeds, options={"reset_mask": mask})
        self._first[index] = frames[index]
        self._fresh[index] = True
        self.lives[index] = info["lives"][index]
        self._offset[index] = _frame_offset(info)[index]
        self._lost_life[index] = False

    def close(self) -> None:
        """Stops the emulators' thread."""
        self.env.close()


def _fire_action(env: Any) -> int | None:
    """FIRE's index in ``env``'s action set (``None`` where the game has no FIRE)."""
    from ale_py import Action

    actions = list(env.ale.get_action_set())
    return actions.index(Action.FIRE) if Action.FIRE in actions else None


def _frame_offset(info: dict[str, np.ndarray]) -> np.ndarray:
    """Each env's emulator frames before its game's: constant during a game, so a change says
    the game restarted."""
    return info["frame_number"].astype(np.int64) - info["episode_frame_number"]


@register_suite
class AtariSuite(EnvSuite):
    """Atari games by ale-py's ROM names (``"breakout"``, ``"pong"``) or gymnasium ids
    (``"BreakoutNoFrameskip-v4"``, ``"ALE/Pong-v5"``, :func:`atari_game`) as
    :class:`AtariEnvs`: :data:`TRAINING` preprocessing, and :data:`EVALUATION` (whole games,
    raw scores) for evaluation. Without ale-py the suite knows no games."""

    name = "atari"

    def names(self) -> list[str]:
        return rom_ids() + atari_ids()

    def knows(self, env_name: str) -> bool:
        return atari_game(env_name) is not None

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``sticky``, ``noop_max`` and ``fire_reset`` (:data:`OPTIONS`), as
        :class:`AtariEnvs` takes them.

        >>> AtariSuite().check_options({"noop_max": -1})
        Traceback (most recent call last):
        ...
        actorq.util.errors.ConfigError: env.options.noop_max must be an integer >= 0, got -1
        """
        for name, value in options.items():
            if name not in OPTIONS:
                raise ConfigError(f"env.options.{name}: the atari suite has no such option; it has "
                                  f"{', '.join(OPTIONS)}")
            if name == "noop_max":
                valid = is_int(value) and value >= 0
            else:
                valid = isinstance(value, bool) or (name == "sticky" and value is None)
            if not valid:
                raise ConfigError(f"env.options.{name} must be {OPTIONS[name]}, got {value!r}")
        return dict(options)

    def make_raw(self, env_name: str, num_envs: int, **options: Any) -> AtariEnvs:
        return _atari_envs(env_name, num_envs, evaluation=False, **options)

    def make_raw_for_evaluation(self, env_name: str, num_envs: int, **options: Any) -> AtariEnvs:
        return _atari_envs(env_name, num_envs, evaluation=True, **options)


def _atari_envs(env_name: str, num_envs: int, evaluation: bool, sticky: bool | None = None,
                **options: Any) -> AtariEnvs:
    """:class:`AtariEnvs` of the game ``env_name`` names, sticky as ``sticky`` says or, where it
    is ``None``, as the name says (an unknown name goes to :class:`AtariEnvs` as it is, which
    refuses it)."""
    game, named_sticky = atari_game(env_name) or (env_name, False)
    return AtariEnvs(game, num_envs, evaluation=evaluation, sticky=named_sticky if sticky is None else sticky,
                     **options)
