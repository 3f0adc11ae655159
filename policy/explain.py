"""`draftwise policy explain`: what a host would get, without loading a model."""

from __future__ import annotations

import argparse
import sys

from policy.inputs import (
    BACKENDS,
    CPU_BLAS,
    OVERRIDE_ENV_VARS,
    QUANT_MODES,
    Device,
    Override,
    PolicyError,
)
from policy.kinds import KNOWN_DRAFTER_KINDS
from policy.overrides import overrides_from
from policy.resolve import Resolution, resolve_width

_NO_QUANT = "none"


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", required=True, choices=BACKENDS)
    parser.add_argument(
        "--compute-capability",
        type=_compute_capability,
        default=None,
        metavar="MAJOR.MINOR",
        help="CUDA compute capability, e.g. 12.1 (GB10) or 9.0 (H200)",
    )
    parser.add_argument(
        "--blas",
        choices=CPU_BLAS,
        default=None,
        help="the BLAS MLX's CPU matmul binds to (cpu only; the server's /health names it)",
    )
    parser.add_argument(
        "--quant",
        choices=(_NO_QUANT, *QUANT_MODES),
        default=_NO_QUANT,
        help="the target's quantization mode (default: none, unquantized)",
    )
    parser.add_argument("--drafter-kind", choices=KNOWN_DRAFTER_KINDS, default="dflash")
    parser.add_argument("--draft-block-size", default=None, metavar="N", help="the CLI override")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an override variable as the server would see it, e.g. "
        "LLAMA_ARG_DRAFT_BLOCK_SIZE=4 (repeatable; the real environment is not read)",
    )
    parser.add_argument("--checkpoint-width", type=int, default=None, metavar="N")
    parser.add_argument("--max-width", type=int, default=None, metavar="N")


def run_explain(args: argparse.Namespace) -> int:
    try:
        resolution = resolve_width(
            overrides=_overrides(args),
            drafter_kind=args.drafter_kind,
            checkpoint_width=args.checkpoint_width,
            device=Device(args.backend, args.compute_capability, args.blas),
            quantization=None if args.quant == _NO_QUANT else args.quant,
            max_width=args.max_width,
        )
    except PolicyError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(format_resolution(resolution))
    return 0


def format_resolution(resolution: Resolution) -> str:
    width = "classic (no speculation)" if resolution.width is None else str(resolution.width)
    lines = [f"width: {width}", f"source: {resolution.source}", f"reason: {resolution.reason}"]
    lines += [f"ignored: {override.describe()}" for override in resolution.ignored]
    return "\n".join(lines)


def _overrides(args: argparse.Namespace) -> list[Override]:
    environ: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise PolicyError(f"--env {item!r} is not NAME=VALUE")
        if name not in OVERRIDE_ENV_VARS:
            raise PolicyError(f"--env {name} is not one of {', '.join(OVERRIDE_ENV_VARS)}")
        environ[name] = value
    return overrides_from(args.draft_block_size, environ)


def _compute_capability(text: str) -> tuple[int, int]:
    major, sep, minor = text.partition(".")
    if not (sep and major.isdigit() and minor.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not MAJOR.MINOR, e.g. 12.1")
    return int(major), int(minor)
