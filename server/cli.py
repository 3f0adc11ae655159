"""`draftwise serve`, `policy explain`, `bench`, `calibrate` and `profile`.

Flags beat environment variables: a flag's value is passed to the settings as
an init value, which pydantic-settings ranks above the environment. A bad
value, from either, stops startup with one line naming it, and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import structlog
from pydantic import ValidationError

from policy import PolicyError, TableEntry, overrides_from
from policy.explain import add_explain_arguments, run_explain
from policy.overrides import override_width
from server.blas import BlasSettingError, reexec_with_chosen_blas
from server.policy_file import default_calibration_path, load_calibration
from server.settings import ServeSettings, env_names, setting_specs

EXIT_BAD_VALUE = 2
EXIT_LOAD_FAILED = 1

log = structlog.get_logger("draftwise.server")

SERVE_FLAGS: dict[str, str] = {name: spec.help for name, spec in setting_specs().items()}

# The measurement commands: each module (server/tooling/) is imported only when its
# command runs, so `draftwise serve` loads none of them.
TOOLING: dict[str, tuple[str, str]] = {
    "bench": ("server.tooling.bench", "sweep draft widths against classic decode"),
    "calibrate": ("server.tooling.calibrate", "measure widths here and write a policy file"),
    "profile": ("server.tooling.profile", "per-stage times of a speculative round"),
}


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; of the tooling commands only `command`'s arguments are loaded."""
    parser = argparse.ArgumentParser(prog="draftwise", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the OpenAI-compatible HTTP API")
    for field, help_text in SERVE_FLAGS.items():
        serve.add_argument(flag_name(field), dest=field, default=None, help=help_text)
    policy = commands.add_parser("policy", help="inspect the draft width policy")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    add_explain_arguments(policy_commands.add_parser("explain", help="what a host would get"))
    for name, (module, help_text) in TOOLING.items():
        if name == command:
            importlib.import_module(module).add_parser(commands)
        else:
            commands.add_parser(name, help=help_text)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    return build_parser(command_of(argv)).parse_args(argv)


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names (its first word that is no option)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "policy":
        return run_explain(args)
    if args.command == "serve":
        return run_serve(args, os.environ)
    # profile measures MLX with the BLAS serve would use
    if args.command == "profile" and with_chosen_blas(os.environ) is None:
        return EXIT_BAD_VALUE
    return args.func(args)


def with_chosen_blas(environ: Mapping[str, str]) -> str | None:
    """reexec_with_chosen_blas's note (run before MLX is imported: it may replace this
    process with itself plus a fast BLAS), or None once it has printed why
    DRAFTWISE_BLAS is bad."""
    try:
        return reexec_with_chosen_blas(sys.orig_argv, environ)
    except BlasSettingError as error:
        print(f"error: invalid setting {error}", file=sys.stderr)
        return None


def run_serve(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    kernels: Mapping[str, str] | None = None,
) -> int:
    """`draftwise serve`; kernels: modes chosen by hand (server/tooling/lab.py only)."""
    flags = {
        field: getattr(args, field)
        for field in SERVE_FLAGS
        if field in ServeSettings.model_fields and getattr(args, field) is not None
    }
    try:
        settings = ServeSettings(**flags)
    except ValidationError as error:
        print(settings_error_line(error, flags, environ), file=sys.stderr)
        return EXIT_BAD_VALUE
    try:
        check_overrides(args.draft_block_size, environ)
    except PolicyError as error:
        print(f"error: invalid draft block size: {error}", file=sys.stderr)
        return EXIT_BAD_VALUE
    try:
        calibration = read_calibration(settings)
    except PolicyError as error:
        label = policy_file_label(settings, flags, environ)
        print(f"error: invalid setting {label}: {error}", file=sys.stderr)
        return EXIT_BAD_VALUE
    blas_note = with_chosen_blas(environ)
    if blas_note is None:
        return EXIT_BAD_VALUE
    from server.serve import serve  # MLX and uvicorn load only when serving

    failure = serve(
        settings, args.draft_block_size, dict(environ), flags, calibration, blas_note, kernels
    )
    if failure is None:
        exit_now(0)
    print(failure_line(failure, flags, environ), file=sys.stderr)
    from drafter.loading import LoadError

    bad_value = isinstance(failure, LoadError | PolicyError)
    exit_now(EXIT_BAD_VALUE if bad_value else EXIT_LOAD_FAILED)


def exit_now(code: int) -> NoReturn:
    """Exit without interpreter teardown: once MLX has run on the worker thread, its native
    threads can hit std::terminate in static destructors (SIGABRT instead of `code`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def read_calibration(settings: ServeSettings) -> tuple[TableEntry, ...]:
    """--policy-file, else what `draftwise calibrate` wrote under the cache dir, if anything."""
    path = settings.policy_file or default_calibration_path(settings.cache_dir)
    return load_calibration(path.expanduser())


def policy_file_label(
    settings: ServeSettings, flags: Mapping[str, Any], environ: Mapping[str, str]
) -> str:
    if settings.policy_file is None:
        return "calibration file (written by draftwise calibrate)"
    return f"{source_of('policy_file', flags, environ)}={str(settings.policy_file)!r}"


def check_overrides(flag: str | None, environ: Mapping[str, str]) -> None:
    """Fail fast on an override that is no width at all; the drafter's maximum is
    checked once it is loaded."""
    for override in overrides_from(flag, environ):
        override_width(override, max_width=None)


def source_of(field: str, flags: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    """The flag or environment variable that set `field` (a flag wins)."""
    if field in flags:
        return flag_name(field)
    upper = {name.upper(): name for name in environ}
    for name in env_names(field):
        if name in upper:
            return upper[name]
    return flag_name(field)


def settings_error_line(
    error: ValidationError, flags: Mapping[str, Any], environ: Mapping[str, str]
) -> str:
    by_env = {name: field for field in ServeSettings.model_fields for name in env_names(field)}
    problems = []
    for item in error.errors():
        key = str(item["loc"][0]) if item["loc"] else ""
        field = by_env.get(key, key)
        source = source_of(field, flags, environ)
        problems.append(f"{source}={item.get('input')!r}: {item['msg']}")
    return "error: invalid setting " + "; ".join(problems)


def failure_line(error: BaseException, flags: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    from drafter.loading import LoadError

    if isinstance(error, LoadError):
        source = source_of(error.setting, flags, environ)
        return f"error: invalid setting {source}={error.value!r}: {error}"
    if isinstance(error, PolicyError):
        return f"error: invalid draft block size: {error}"
    return f"error: the model failed to load: {type(error).__name__}: {error}"


if __name__ == "__main__":
    sys.exit(main())
