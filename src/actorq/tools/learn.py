"""``actorq.learn(...)``: train one run and get its agent back in one call, as
Stable-Baselines3's ``PPO(...).learn(...)`` does.

The run is the one ``actorq train`` would run with the same overrides (composed and checked
by :func:`actorq.config`, trained by :func:`actorq.train.train`), with the same run dir,
checkpoints, TensorBoard logs, ``summary.json`` and saved overrides (``.hydra/overrides.yaml``),
so ``actorq resume``, ``report`` and ``evaluate`` take it as they take a run of the command
line. A run dir that holds another run is refused, unless ``ckpt_path="last"`` continues it. Call it under
``if __name__ == "__main__":``: the actor processes import the calling script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actorq.run.compose import config_and_overrides, overrides_of
from actorq.run.resume import LAST_CHECKPOINT, check_new_run_dir, find_checkpoint, save_overrides
from actorq.tools.agent import Agent, load
from actorq.util.errors import ConfigError


def learn(experiment: str | None = None, *overrides: str, **settings: Any) -> Agent:
    """Trains one run and returns its trained agent.

    Args:
        experiment: an experiment's name (``"ppo_cartpole"``; ``actorq train --help`` lists
            them), or ``None`` for each config group's defaults (then say ``algo`` and ``env``).
        *overrides: overrides as the command line takes them (``"quant.bits=8"``).
        **settings: the same as keywords: a group's option (``algo="sac"``), a key
            (``seed=1``), or a group's keys as a dict (``quant={"bits": 8}``). ``env`` is an
            env file (``"cartpole"``), an environment's id (``"Acrobot-v1"``, ``"ALE/Pong-v5"``,
            ``"walker-run"``) or a function or class defined at the top level of a module
            that returns a ``gymnasium.Env`` (:func:`actorq.envs.gymnasium.factory_name`);
            ``total_frames`` is ``actors.total_frames``.

    Returns:
        The :class:`~actorq.tools.agent.Agent` of the run's last checkpoint (the learner's
        fp32 policy), with the run's ``summary.json`` as ``agent.summary``. A run without
        checkpoints (``callbacks="no_checkpoint"``) gives the learner's policy as trained,
        which cannot ``export``.

    Raises:
        ConfigError: what ``actorq train`` would refuse, in its one line.

    Example (a full run; ``tests/integration/test_readme.py`` runs it with a tiny budget)::

        agent = actorq.learn("ppo_cartpole", quant={"bits": 8}, run_dir="runs/ppo")
        agent = actorq.learn(algo="ppo", env="Acrobot-v1", total_frames=100_000)
        action, _ = agent.predict(observation, deterministic=True)
        mean, std = agent.evaluate(episodes=10)
        agent.save("ppo.pt")  # one file: actorq.load("ppo.pt")
        agent.export("policy.pt")
    """
    from actorq.train import train  # the training stack, only when a run trains

    named = [f"+experiment={experiment}"] if experiment is not None else []
    try:
        cfg, saved = config_and_overrides(*named, *overrides, *overrides_of(learn_settings(settings)))
    except ConfigError as error:
        if experiment is not None and f"Could not find 'experiment/{experiment}'" in str(error) \
                and names_an_env(experiment):
            raise ConfigError(f"{experiment!r} is an environment, not an experiment: say "
                              f"actorq.learn(algo=ALGO, env={experiment!r}), e.g. algo='ppo'") from error
        raise
    run_dir = Path(cfg.run_dir)
    check_new_run_dir(run_dir, find_checkpoint(cfg.get("ckpt_path"), run_dir))
    save_overrides(run_dir, saved)  # as actorq train's, so that actorq resume and report read it alike
    summary, objects = train(cfg)
    if (run_dir / LAST_CHECKPOINT).is_file():
        agent = load(run_dir)
    else:
        learner = objects["learner"].eval()
        agent = Agent(cfg, learner, learner.behaviour_network, "learner", "fp32", checkpoint=None)
    agent.summary = summary
    return agent


def names_an_env(name: str) -> bool:
    """Whether ``env=name`` names an environment (an env file or an id)."""
    from actorq.run.env_ids import env_overrides

    try:
        env_overrides([f"env={name}"])
    except ConfigError:
        return False
    return True


SETTINGS_ALIASES = {"total_frames": "actors.total_frames"}
"""``learn``'s keywords that name a key of a group, as SB3's ``learn(total_timesteps)``."""


def learn_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """``learn``'s keywords as the config's: an env factory as the name actor processes import
    it by, :data:`SETTINGS_ALIASES` by their keys.

    Example:
        >>> learn_settings({"algo": "ppo", "env": "Acrobot-v1", "total_frames": 4096})
        {'algo': 'ppo', 'env': 'Acrobot-v1', 'actors.total_frames': 4096}
        >>> from gymnasium.envs.classic_control import AcrobotEnv
        >>> learn_settings({"env": AcrobotEnv})
        {'env': 'gymnasium.envs.classic_control.acrobot:AcrobotEnv'}
    """
    env = settings.get("env")
    if callable(env):
        from actorq.envs.gymnasium import factory_name

        settings = {**settings, "env": factory_name(env)}
    return {SETTINGS_ALIASES.get(key, key): value for key, value in settings.items()}
