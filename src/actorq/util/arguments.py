"""One argument grammar for every command: ``KEY=VALUE``, as ``actorq train`` and ``actorq
evaluate`` take it. The commands whose options are ``argparse`` flags (``export``, ``report``,
``bench``) read ``KEY=VALUE`` as their ``--key VALUE`` (``bits=8`` is ``--bits 8``,
``widths=[64,256]`` is ``--widths 64 256``, ``quick=true`` is ``--quick``); the flags keep
working.

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("run"); _ = parser.add_argument("--bits", type=int)
    >>> _ = parser.add_argument("--widths", type=int, nargs="+"); _ = parser.add_argument("--quick", action="store_true")
    >>> as_options(["runs/a=b", "bits=8", "widths=[64,256]", "quick=true"], parser)
    ['runs/a=b', '--bits', '8', '--widths', '64', '256', '--quick']
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

TRUE, FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def as_options(argv: Sequence[str] | None, parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` (the command line's when ``None``) with each ``KEY=VALUE`` whose ``--key`` the
    parser has written as that option; anything else (a path that holds an ``=``) is left as
    it is."""
    argv = list(sys.argv[1:] if argv is None else argv)
    actions = {option: action for action in parser._actions for option in action.option_strings}
    converted = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        action = actions.get("--" + key.replace("_", "-")) if sep and not key.startswith("-") else None
        if action is None:
            converted.append(arg)
        elif action.nargs == 0:  # a flag: key=true sets it, key=false leaves it off
            if value.lower() not in TRUE + FALSE:
                parser.error(f"{key}={value}: say {key}=true or {key}=false")
            converted += [action.option_strings[-1]] if value.lower() in TRUE else []
        elif value.startswith("[") and value.endswith("]"):
            converted += [action.option_strings[-1], *(item.strip() for item in value[1:-1].split(",") if item.strip())]
        else:
            converted += [action.option_strings[-1], value]
    return converted
