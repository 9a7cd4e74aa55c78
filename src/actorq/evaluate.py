"""``actorq evaluate RUN_DIR [key=value ...]``: play a trained run's policy.

Loads the run with :func:`actorq.load`, plays ``episodes`` episodes the way the run's
evaluation does (a lean batch of envs, :func:`actorq.envs.rollout_return`) and prints the
mean return ± its standard deviation; with ``video=true`` it also writes the first episode
as an mp4 (:mod:`actorq.tools.video`). Exit codes: 0 done, 2 bad input (one line
``actorq.evaluate: error: ...``: no such run dir or checkpoint, a damaged checkpoint, an
unknown key, a bad value, no renderer for the video, an env that cannot render).

Example:
    >>> parse_args(["outputs/run", "episodes=3", "policy=quantized"])  # doctest: +NORMALIZE_WHITESPACE
    Options(run_dir=PosixPath('outputs/run'), ckpt='last', episodes=3, policy='quantized', video=False,
            video_path=None, video_steps=None, seed=None, deterministic=None)
    >>> parse_args(["outputs/run", "episode=3"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    actorq.util.errors.ConfigError: unknown key 'episode'; the keys are ckpt, episodes, policy, video, video_path, video_steps, seed, deterministic
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from actorq.util.arguments import FALSE, TRUE
from actorq.util.errors import ConfigError

PROG = "actorq.evaluate"
USAGE = """usage: actorq evaluate RUN_DIR [key=value ...]

Plays the policy of a run trained by `actorq train` and prints its mean return.

keys:
  ckpt=last|PATH             checkpoint: last (checkpoints/last.ckpt), a path, or a file name
                             in RUN_DIR/checkpoints/ (default: last)
  episodes=N                 episodes to play (default: 10)
  policy=learner|quantized   the learner's fp32 policy or the actors' reduced-precision copy
                             (default: learner)
  video=true|false           also write the first episode as an mp4 (default: false)
  video_path=PATH            where (default: RUN_DIR/videos/eval-<ckpt>-<policy>.mp4)
  video_steps=N              record at most N steps of the episode (default: all of it)
  seed=N                     the first episode's seed (default: the run's seed)
  deterministic=true|false   greedy actions, or sampled from a stochastic policy (PPO)
                             (default: as the run's evaluation, eval.deterministic)
"""


@dataclasses.dataclass(frozen=True)
class Options:
    """The command line's values."""

    run_dir: Path
    ckpt: str = "last"
    episodes: int = 10
    policy: str = "learner"
    video: bool = False
    video_path: Path | None = None
    video_steps: int | None = None
    seed: int | None = None
    deterministic: bool | None = None


KEYS = tuple(field.name for field in dataclasses.fields(Options))[1:]


def parse_args(argv: list[str]) -> Options:
    """``RUN_DIR key=value ...`` -> :class:`Options`; a ``ConfigError`` for anything else."""
    if not argv or "=" in argv[0]:
        raise ConfigError("the first argument must be a run dir (RUN_DIR key=value ...); see --help")
    values: dict = {"run_dir": Path(argv[0]).expanduser()}
    for arg in argv[1:]:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigError(f"expected key=value, got {arg!r}; see --help")
        if key not in KEYS:
            raise ConfigError(f"unknown key {key!r}; the keys are {', '.join(KEYS)}")
        values[key] = _value(key, value)
    return Options(**values)


def _value(key: str, value: str):
    """One key's value, converted and checked."""
    if key in ("episodes", "video_steps", "seed"):
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{key}={value}: must be an integer") from None
        if key != "seed" and number <= 0:
            raise ConfigError(f"{key}={value}: must be positive")
        return number
    if key in ("video", "deterministic"):
        if value.lower() not in TRUE + FALSE:
            raise ConfigError(f"{key}={value}: must be true or false")
        return value.lower() in TRUE
    if key == "video_path":
        return Path(value).expanduser()
    if not value:
        raise ConfigError(f"{key}=: needs a value")
    return value


def evaluate(options: Options, report: Callable[[str], None] = print) -> None:
    """Loads the run, plays the episodes (and records the video), reporting each result."""
    import torch

    from actorq.tools.agent import load
    from actorq.tools.rebuild import read_config
    from actorq.tools.video import choose_gl, needs_gl, record

    # A greedy step is one small forward (batch <= episodes), as an actor's is: one thread,
    # as the actors run; more threads only wait on each other (much slower on a busy CPU).
    torch.set_num_threads(1)

    if options.video:  # before anything imports dm_control, which fixes its renderer then
        env = read_config(options.run_dir).env
        if needs_gl(env.name, env.get("library")):
            choose_gl()
    agent = load(options.run_dir, options.ckpt, options.policy)
    seed = agent.config.get("seed", 0) if options.seed is None else options.seed
    returns = agent.evaluate(options.episodes, seed, options.deterministic, return_episode_rewards=True)
    report(f"{agent.config.env.name}, {agent.policy} policy ({agent.precision}), {agent.checkpoint.name}: "
           f"return {format_returns(returns)}")
    if options.video:
        path = options.video_path or options.run_dir / "videos" / f"eval-{agent.checkpoint.stem}-{agent.policy}.mp4"
        path, frames, episode_return = record(agent, path, seed, max_steps=options.video_steps)
        played = f"the first {options.video_steps} steps' return" if options.video_steps else "return"
        report(f"Video: {path} ({frames} frames, {played} {episode_return:.1f})")


def format_returns(returns: list[float]) -> str:
    """``"mean ± std over N episodes"``.

    Example:
        >>> format_returns([10.0, 12.0, 14.0])
        '12.0 ± 1.6 over 3 episodes'
    """
    noun = "episode" if len(returns) == 1 else "episodes"
    return f"{statistics.fmean(returns):.1f} ± {statistics.pstdev(returns):.1f} over {len(returns)} {noun}"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if {"-h", "--help"} & set(argv):
        print(USAGE, end="")
        return
    try:
        evaluate(parse_args(argv))
    except ConfigError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
