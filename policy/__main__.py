"""`python -m policy explain ...`, the same command the server CLI mounts."""

from __future__ import annotations

import argparse
import sys

from policy.explain import add_explain_arguments, run_explain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m policy")
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser("explain", help="print the width a host would get, and why")
    add_explain_arguments(explain)
    return run_explain(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
