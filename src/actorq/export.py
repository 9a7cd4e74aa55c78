"""``actorq export RUN_DIR OUT [--bits N]``: a run's policy as one file that plain ``torch``
loads and runs without actorq (:func:`actorq.tools.standalone.export_checkpoint`): an
``ExportedProgram`` (``torch.export``) if ``OUT`` ends in ``.pt2``, else TorchScript.

It writes the actors' policy of the run's last checkpoint (or of the ``.ckpt`` named instead
of the run dir) at the run's precision: the payload they last received (an fp32 run's fp32
policy), or with ``--bits`` a fresh quantization, calibrated on the observations the run saved
with the checkpoint. ``torch.export.load(OUT).module()(observations) -> actions`` (``.pt2``)
or ``torch.jit.load(OUT)(observation) -> action``. From Python:
``actorq.load(RUN_DIR).export(OUT)``, or :func:`export` for a network of your own.
``tests/integration/test_export.py`` runs the command on a real checkpoint.
"""

from __future__ import annotations

import argparse
import sys

from actorq.tools.rebuild import actors_network, calibration_set, load_learner, payload_format
from actorq.tools.standalone import EXPORTED_PROGRAM, StandalonePolicy, export, export_checkpoint
from actorq.util.errors import ConfigError
from actorq.util.arguments import as_options

__all__ = ["StandalonePolicy", "actors_network", "calibration_set", "export", "export_checkpoint", "load_learner",
           "payload_format"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="actorq export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a run dir (its checkpoints/last.ckpt) or a .ckpt file")
    parser.add_argument("out", help="the file to write: .pt2 (torch.export), else TorchScript")
    parser.add_argument("--bits", type=int, default=None, help="re-quantize at this precision (8, 16, 2..7, 32)")
    return parser.parse_args(as_options(argv, parser))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        path = export_checkpoint(args.checkpoint, args.out, args.bits)
    except ConfigError as error:
        print(f"actorq.export: error: {error}", file=sys.stderr)
        sys.exit(2)
    loader = "torch.export.load({!r}).module()" if path.suffix == EXPORTED_PROGRAM else "torch.jit.load({!r})"
    print(f"Wrote {path}: load it with {loader.format(str(path))}")


if __name__ == "__main__":
    main()
