"""Operator overrides: each surface alone, every pair, and every invalid value."""

from __future__ import annotations

import itertools

import pytest

from policy import (
    OVERRIDE_ENV_VARS,
    OVERRIDE_ORIGINS,
    Device,
    Override,
    PolicyError,
    Resolution,
    overrides_from,
    resolve_width,
)

GB10 = Device("cuda", (12, 1))
# A distinct width per surface, none equal to the table's 4 or the default 16.
SURFACE_WIDTHS = {
    "flag": "8",
    "env:DRAFTWISE_DRAFT_BLOCK_SIZE": "6",
    "env:LLAMA_ARG_DRAFT_BLOCK_SIZE": "3",
    "env:MLXCEL_DRAFT_BLOCK_SIZE": "5",
}
SURFACE_NAMES = {
    "flag": "--draft-block-size",
    "env:DRAFTWISE_DRAFT_BLOCK_SIZE": "DRAFTWISE_DRAFT_BLOCK_SIZE",
    "env:LLAMA_ARG_DRAFT_BLOCK_SIZE": "LLAMA_ARG_DRAFT_BLOCK_SIZE",
    "env:MLXCEL_DRAFT_BLOCK_SIZE": "MLXCEL_DRAFT_BLOCK_SIZE",
}


def set_surfaces(values: dict[str, str]) -> list[Override]:
    """Overrides as the server builds them: the flag value plus an environment mapping."""
    environ = {o.removeprefix("env:"): v for o, v in values.items() if o.startswith("env:")}
    return overrides_from(values.get("flag"), environ)


def resolve(overrides: list[Override], max_width: int | None = 16) -> Resolution:
    return resolve_width(
        overrides=overrides,
        drafter_kind="dflash",
        checkpoint_width=None,
        device=GB10,
        quantization="affine",
        max_width=max_width,
    )


def test_the_override_surfaces_are_the_flag_then_the_three_variables_in_order() -> None:
    assert OVERRIDE_ENV_VARS == (
        "DRAFTWISE_DRAFT_BLOCK_SIZE",
        "LLAMA_ARG_DRAFT_BLOCK_SIZE",
        "MLXCEL_DRAFT_BLOCK_SIZE",
    )
    assert tuple(SURFACE_WIDTHS) == OVERRIDE_ORIGINS


def test_overrides_from_lists_set_values_highest_precedence_first() -> None:
    environ = {"MLXCEL_DRAFT_BLOCK_SIZE": "5", "DRAFTWISE_DRAFT_BLOCK_SIZE": "6", "HOME": "/root"}
    assert overrides_from(8, environ) == [
        Override("flag", "8"),
        Override("env:DRAFTWISE_DRAFT_BLOCK_SIZE", "6"),
        Override("env:MLXCEL_DRAFT_BLOCK_SIZE", "5"),
    ]


def test_overrides_from_treats_empty_values_as_unset() -> None:
    environ = {name: "" for name in OVERRIDE_ENV_VARS} | {"LLAMA_ARG_DRAFT_BLOCK_SIZE": "  "}
    assert overrides_from("", environ) == []
    assert overrides_from(None, {}) == []


@pytest.mark.parametrize("origin", OVERRIDE_ORIGINS)
def test_each_surface_alone_sets_the_width_and_names_itself(origin: str) -> None:
    raw = SURFACE_WIDTHS[origin]
    resolution = resolve(set_surfaces({origin: raw}))
    assert (resolution.width, resolution.source, resolution.ignored) == (int(raw), origin, ())
    expected = f"flag --draft-block-size={raw}" if origin == "flag" else f"{origin}={raw}"
    assert resolution.reason == expected


PAIRS = list(itertools.combinations(OVERRIDE_ORIGINS, 2))


@pytest.mark.parametrize(("higher", "lower"), PAIRS, ids=[f"{h}>{lo}" for h, lo in PAIRS])
def test_of_every_pair_of_surfaces_the_higher_wins_and_the_lower_is_reported(
    higher: str, lower: str
) -> None:
    resolution = resolve(
        set_surfaces({lower: SURFACE_WIDTHS[lower], higher: SURFACE_WIDTHS[higher]})
    )
    assert (resolution.width, resolution.source) == (int(SURFACE_WIDTHS[higher]), higher)
    assert resolution.ignored == (Override(lower, SURFACE_WIDTHS[lower]),)
    assert resolution.reason.endswith(f"(ignored: {lower}={SURFACE_WIDTHS[lower]})")


def test_with_all_four_set_the_flag_wins_and_the_rest_are_ignored_in_order() -> None:
    resolution = resolve(set_surfaces(SURFACE_WIDTHS))
    assert (resolution.width, resolution.source) == (8, "flag")
    assert [o.origin for o in resolution.ignored] == list(OVERRIDE_ORIGINS[1:])
    assert resolution.reason == (
        "flag --draft-block-size=8 (ignored: env:DRAFTWISE_DRAFT_BLOCK_SIZE=6, "
        "env:LLAMA_ARG_DRAFT_BLOCK_SIZE=3, env:MLXCEL_DRAFT_BLOCK_SIZE=5)"
    )


def test_precedence_does_not_depend_on_the_order_overrides_are_passed_in() -> None:
    overrides = set_surfaces(SURFACE_WIDTHS)
    assert resolve(list(reversed(overrides))) == resolve(overrides)


def test_an_override_beats_the_measured_table() -> None:
    assert resolve(set_surfaces({"flag": "16"})).width == 16


INVALID = [
    ("abc", "is not an integer"),
    ("4.0", "is not an integer"),
    ("1_6", "is not an integer"),
    ("0", "is below 2"),
    ("1", "is below 2"),
    ("-4", "is below 2"),
    ("17", "is above the drafter's maximum width 16"),
]


@pytest.mark.parametrize(("raw", "problem"), INVALID, ids=[raw for raw, _ in INVALID])
@pytest.mark.parametrize("origin", OVERRIDE_ORIGINS)
def test_an_invalid_value_is_an_error_naming_the_surface_and_the_value(
    origin: str, raw: str, problem: str
) -> None:
    with pytest.raises(PolicyError) as error:
        resolve(set_surfaces({origin: raw}))
    assert str(error.value).startswith(f"{SURFACE_NAMES[origin]}={raw!r} {problem}")


def test_the_not_an_integer_message_reads_plainly() -> None:
    with pytest.raises(PolicyError) as error:
        resolve(overrides_from(None, {"DRAFTWISE_DRAFT_BLOCK_SIZE": "abc"}))
    assert str(error.value) == "DRAFTWISE_DRAFT_BLOCK_SIZE='abc' is not an integer"


def test_an_invalid_value_on_a_losing_surface_still_stops_startup() -> None:
    with pytest.raises(PolicyError, match="MLXCEL_DRAFT_BLOCK_SIZE='1' is below 2"):
        resolve(overrides_from(8, {"MLXCEL_DRAFT_BLOCK_SIZE": "1"}))


def test_without_a_drafter_maximum_large_overrides_are_accepted() -> None:
    assert resolve(overrides_from(64, {}), max_width=None).width == 64


def test_surrounding_whitespace_in_a_value_is_tolerated() -> None:
    assert resolve(overrides_from(None, {"LLAMA_ARG_DRAFT_BLOCK_SIZE": " 5\n"})).width == 5


def test_an_unknown_origin_is_rejected() -> None:
    with pytest.raises(PolicyError, match="unknown override origin 'env:BLOCK'"):
        Override("env:BLOCK", "4")
