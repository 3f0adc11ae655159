"""`draftwise serve` with kernel modes chosen by hand: the entry every server that
`draftwise bench` and the load sweep start runs, so a served A/B can pin a mode
(`--server-arg=--activation --server-arg=mlx`, `--compare-server-arg=...`).

An operator's `draftwise serve` has no such flags: the device's bundle serves
(drafter/forward.py: Kernels; drafter/attention.py, linear.py, activation.py say which
and why). Usage: python -c "from server.tooling.lab import main; main()" serve [serve
flags] [--attention MODE] [--linear MODE] [--activation MODE].
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from drafter.diagnostics import ACTIVATION_MODES, ATTENTION_MODES, LINEAR_MODES
from server.cli import EXIT_BAD_VALUE, parse_args, run_serve

LAB_FLAGS = {"attention": ATTENTION_MODES, "linear": LINEAR_MODES, "activation": ACTIVATION_MODES}


def split_args(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """(the kernel modes named, the rest of the command line)."""
    parser = argparse.ArgumentParser(prog="draftwise-lab", add_help=False)
    for name, modes in LAB_FLAGS.items():
        parser.add_argument(f"--{name}", choices=modes)
    lab, rest = parser.parse_known_args(list(argv))
    return {k: v for k, v in vars(lab).items() if v is not None}, rest


def main(argv: Sequence[str] | None = None) -> int:
    kernels, rest = split_args(sys.argv[1:] if argv is None else argv)
    args = parse_args(rest)
    if args.command != "serve":
        print("error: the lab entry runs `serve` only", file=sys.stderr)
        return EXIT_BAD_VALUE
    return run_serve(args, os.environ, kernels)
