"""``python -m actorq +experiment=NAME key=value ...``: train one run (or a sweep with -m).

Exit codes: 0 done, 2 bad input (a one-line ``actorq: error: ...``: an unknown key, group or
option, bad override syntax, a value out of range), 130/143 interrupted (Ctrl-C/SIGTERM),
1 anything else (a failed run).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from actorq.errors import ConfigError


@hydra.main(version_base="1.3", config_path="pkg://actorq.conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from actorq.train import Interrupted, describe_outputs, train

    try:
        summary, _ = train(cfg)
    except ConfigError as error:
        print(f"actorq: error: {error}", file=sys.stderr)
        sys.exit(2)
    except Interrupted:
        print(f"actorq: interrupted; the last checkpoint and summary.json (status: interrupted) "
              f"are in {cfg.run_dir}", file=sys.stderr)
        raise
    print(f"Final eval return {summary['final_return']:.1f} after {summary['frames']} frames "
          f"in {summary['wall_clock_s']:.0f} s")
    print(describe_outputs(cfg))
    return summary["final_return"]


def composition_error(argv: list[str]) -> str | None:
    """Why Hydra cannot compose the config of a single run from ``argv``, in one line (``None``
    when it can). Sweeps (``-m``), Hydra's own flags and ``hydra.*`` overrides are left to
    Hydra, which checks each job itself."""
    if any(arg.startswith("-") for arg in argv):
        return None
    overrides = [arg for arg in argv if not arg.lstrip("+~").startswith("hydra")]
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module("actorq.conf", version_base="1.3"):
            compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as error:
        message = str(error)
        if "is not in struct" in str(error.__cause__):
            message = message.replace(".\n", ": no such key.\n", 1)
        return one_line(message)
    return None


def one_line(message: str) -> str:
    """Hydra's multi-line message as one line: the first line, its hint, the options offered.

    >>> one_line("In 'config': Could not find 'algo/x'\\n\\nAvailable options in 'algo':\\n\\tdqn\\n\\ttd3\\n"
    ...          "Config search path:\\n\\tprovider=main")
    "In 'config': Could not find 'algo/x'; available options in 'algo': dqn, td3"
    >>> one_line("Could not override 'foo'.\\nTo append to your config use +foo=1")
    "Could not override 'foo'. To append to your config use +foo=1"
    """
    head, _, rest = message.partition("\n")
    if "Available options in" in rest:
        listing = rest.split("Available options in", 1)[1].split("Config search path", 1)[0]
        group, _, options = listing.partition(":")
        return f"{head}; available options in {group.strip()}: {', '.join(options.split())}"
    hint = rest.strip().splitlines()[0] if rest.strip() else ""
    return f"{head} {hint}".strip()


if __name__ == "__main__":
    error = composition_error(sys.argv[1:])
    if error is not None:
        print(f"actorq: error: {error}", file=sys.stderr)
        sys.exit(2)
    main()
