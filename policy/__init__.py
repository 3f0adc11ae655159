"""Pure width policy: which draft block width to serve, from where, and why."""

from policy.entries import (
    TableEntry,
    entries_from_json,
    entries_to_json,
    entry_from_dict,
    entry_to_dict,
    find_entry,
)
from policy.inputs import (
    BACKENDS,
    CPU_BLAS,
    OVERRIDE_ENV_VARS,
    OVERRIDE_ORIGINS,
    QUANT_MODES,
    Device,
    Override,
    PolicyError,
)
from policy.kinds import KNOWN_DRAFTER_KINDS, default_width
from policy.overrides import MIN_WIDTH, overrides_from
from policy.resolve import Resolution, resolve_width
from policy.table import TABLE

__all__ = [
    "BACKENDS",
    "CPU_BLAS",
    "KNOWN_DRAFTER_KINDS",
    "MIN_WIDTH",
    "OVERRIDE_ENV_VARS",
    "OVERRIDE_ORIGINS",
    "QUANT_MODES",
    "TABLE",
    "Device",
    "Override",
    "PolicyError",
    "Resolution",
    "TableEntry",
    "default_width",
    "entries_from_json",
    "entries_to_json",
    "entry_from_dict",
    "entry_to_dict",
    "find_entry",
    "overrides_from",
    "resolve_width",
]
