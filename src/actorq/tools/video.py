"""Videos of a trained policy: one greedy episode rendered offscreen and written as an mp4.

gymnasium envs render through ``render_mode="rgb_array"`` (CartPole with pygame, MuJoCo
tasks with MuJoCo), dm_control tasks through ``physics.render``, and Atari games show what
the agent sees (its newest 84x84 grayscale frame, 4x larger). MuJoCo renders with an
offscreen OpenGL backend, fixed when ``mujoco`` is first imported: :func:`choose_gl` picks
one at run time (``MUJOCO_GL`` if set, else the first of EGL and OSMesa that starts here),
so call it before anything imports MuJoCo; ``actorq evaluate`` does. The mp4 is
written with imageio's own ffmpeg binary (``imageio[ffmpeg]``), first to a temporary name,
then renamed.

Example:
    >>> needs_gl("CartPole-v1", "gymnasium"), needs_gl("cartpole-balance", "dm_control"), needs_gl("breakout", "atari")
    (False, True, False)
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from actorq.envs import find_suite, rollout_return, suite_options
from actorq.envs.atari import AtariSuite
from actorq.envs.batched import LeanBatchedEnv
from actorq.envs.dm_control import DMControlSuite
from actorq.envs.gymnasium import GymnasiumSuite, needs_mujoco
from actorq.util.errors import ConfigError

GL_BACKENDS = ("egl", "osmesa")
GL_PACKAGES = "apt-get install libegl1 libgl1 libegl-mesa0 (EGL) or libosmesa6 (OSMesa)"
FRAME_SIZE = (240, 320)  # height, width of dm_control frames
# Starts an offscreen context and MuJoCo's renderer in it, in a fresh process (a failed
# backend can leave this one unable to try another). The renderer is the test: GLFW without a
# display only warns when its context fails, and MjrContext then raises.
_PROBE = """
import mujoco
context = mujoco.GLContext(16, 16)
context.make_current()
mujoco.MjrContext(mujoco.MjModel.from_xml_string("<mujoco/>"), mujoco.mjtFontScale.mjFONTSCALE_100).free()
context.free()
"""


def needs_gl(env_name: str, library: str | None) -> bool:
    """Whether rendering ``env_name`` goes through MuJoCo (and so OpenGL), decided without
    importing dm_control (whose first import fixes its backend)."""
    if library == DMControlSuite.name:
        return True
    import gymnasium

    if env_name in gymnasium.envs.registry:
        return needs_mujoco(env_name)
    return library not in (GymnasiumSuite.name, AtariSuite.name)  # a dm_control task, or a suite of one's own


def choose_gl() -> str:
    """MuJoCo's offscreen OpenGL backend for this process: ``MUJOCO_GL`` if set, else the first
    of ``egl`` and ``osmesa`` that can start a context here, which is then set as
    ``MUJOCO_GL`` (and ``PYOPENGL_PLATFORM``) for the MuJoCo imported after this call.

    Raises:
        ConfigError: no backend can start (no EGL or OSMesa library, or no usable device).
    """
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        if not _starts(chosen):
            raise ConfigError(f"video: MUJOCO_GL={chosen} cannot open an offscreen OpenGL context here; unset it "
                              f"to let actorq try {' and '.join(GL_BACKENDS)}, or install one: {GL_PACKAGES}")
        return chosen
    for backend in GL_BACKENDS:
        if _starts(backend):
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return backend
    raise ConfigError(f"video: no offscreen OpenGL renderer starts here (tried MUJOCO_GL="
                      f"{' and '.join(GL_BACKENDS)}); install one: {GL_PACKAGES}")


def _starts(backend: str) -> bool:
    """Whether MuJoCo can open an offscreen context with ``backend``, tried in a fresh process."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": os.environ.get("PYOPENGL_PLATFORM", backend)}
    try:
        return subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, timeout=120).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def record(agent, path: str | Path, seed: int, max_steps: int | None = None) -> tuple[Path, int, float]:
    """Plays one greedy episode of ``agent`` (an :class:`~actorq.tools.agent.Agent`) and writes it as
    an mp4: the episode ``agent.make_eval_env(episodes, seed)`` plays first, or its first
    ``max_steps`` steps.

    Returns:
        The path written, the number of frames and the episode's return.
    """
    env_cfg = agent.config.env
    if needs_gl(env_cfg.name, env_cfg.get("library")):
        _check_dm_control_backend(choose_gl())
    raw, frame, fps = _renderable(env_cfg.name, env_cfg.get("library"), suite_options(env_cfg.get("options")))
    frames: list[np.ndarray] = []

    def act(observation):
        frames.append(frame(observation))  # the state this action is chosen in
        return agent.act(observation)

    try:
        env = LeanBatchedEnv(raw, batched=False, seed=seed)
        [episode_return] = rollout_return(env, act, 1, *([max_steps] if max_steps else []))
        frames.append(frame(env.observation))  # the state the episode ended in
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - the GL stack fails in many ways; say which
        raise ConfigError(f"video: rendering {env_cfg.name} failed (MUJOCO_GL="
                          f"{os.environ.get('MUJOCO_GL', 'unset')}): {type(error).__name__}: "
                          f"{' '.join(str(error).split())[:200]}") from error
    finally:
        _close(raw)
    return write_mp4(frames, path, fps), len(frames), episode_return


def write_mp4(frames: list[np.ndarray], path: str | Path, fps: float) -> Path:
    """Writes ``[H, W, 3]`` uint8 frames as an H.264 mp4 (via a temporary file, then renamed)."""
    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial_path = path.with_name(f".{path.name}.part.mp4")
    try:
        # macro_block_size=2: keep the frame size (H.264 needs even sizes, not multiples of 16)
        with imageio.get_writer(partial_path, fps=fps, codec="libx264", macro_block_size=2) as writer:
            for image in frames:
                writer.append_data(np.ascontiguousarray(image))
    except OSError as error:
        raise ConfigError(f"video: cannot write {path}: {error.strerror or error}") from error
    partial_path.replace(path)
    return path


def _renderable(env_name: str, library: str | None, options: dict) -> tuple[object, Callable[[object], np.ndarray],
                                                                            float]:
    """One raw env of ``env_name`` (with the suite's ``options``) that can render, its
    ``frame(observation)`` and its frames per second."""
    suite = find_suite(env_name, library)
    options = suite.check_options(options)
    if isinstance(suite, GymnasiumSuite):
        from actorq.envs.gymnasium import GymnasiumEnvs

        if not GymnasiumEnvs.supports(env_name):
            raise ConfigError(f"video: {env_name} has no flat observation vector; it cannot be recorded")
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws offscreen; no display to find
        raw = GymnasiumEnvs(env_name, 1, make=partial(_make_rendering, env_name))
        env = raw.envs[0]
        return raw, lambda _: env.render(), float(env.metadata.get("render_fps") or 30)
    if isinstance(suite, DMControlSuite):
        raw = suite.make_raw(env_name, 1)
        env = raw.envs[0]
        height, width = FRAME_SIZE
        render = partial(env.physics.render, height=height, width=width, camera_id=0)
        return raw, lambda _: render(), 1 / env.control_timestep()
    if isinstance(suite, AtariSuite):  # what the agent sees: its newest frame, larger
        return suite.make_raw_for_evaluation(env_name, 1, **options), agent_view, ATARI_FPS
    raise ConfigError(f"video: env.library={suite.name} cannot be recorded (gymnasium, dm_control and atari can)")


ATARI_FPS = 15.0
"""An Atari agent's steps per second at the game's speed: 60 frames/s, 4 frames per step."""


def agent_view(observation, scale: int = 4) -> np.ndarray:
    """The newest of the stacked grayscale frames an Atari agent sees, ``scale`` times larger,
    as an RGB image."""
    newest = np.asarray(observation).reshape(-1, *np.shape(observation)[-2:])[-1]
    large = newest.repeat(scale, axis=0).repeat(scale, axis=1)
    return np.repeat(large[:, :, None], 3, axis=2)


def _make_rendering(env_name: str):
    """``gymnasium.make(env_name, render_mode="rgb_array")``. ``render_mode`` is gymnasium's one
    way to ask an env for frames: an env whose constructor does not take it cannot be recorded
    (a ``ConfigError``). gymnasium's warning that the env does not list ``rgb_array`` in its
    ``render_modes`` is dropped: that error, or a video recorded anyway, follows it."""
    import gymnasium

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*render_mode='rgb_array' that is not in the possible")
            return gymnasium.make(env_name, render_mode="rgb_array")
    except TypeError as error:
        if "'render_mode'" not in str(error):
            raise
        raise ConfigError(f"video: {env_name} cannot render: its constructor takes no render_mode, gymnasium's way "
                          f"to ask an env for frames; evaluate it with video=false") from error


def _check_dm_control_backend(backend: str) -> None:
    """dm_control fixes its renderer when first imported: it must be ``backend``."""
    render = sys.modules.get("dm_control._render")
    if render is not None and render.BACKEND != backend:
        raise ConfigError(f"video: dm_control was imported with the {render.BACKEND} renderer before "
                          f"MUJOCO_GL was set; set MUJOCO_GL={backend} before importing actorq")


def _close(raw) -> None:
    """Frees the raw env's renderer now: dm_control's OpenGL context left to interpreter exit
    prints errors from its render thread."""
    for env in raw.envs:
        physics = getattr(env, "physics", None)
        if physics is not None:
            physics.free()
        else:
            env.close()
