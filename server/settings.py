"""Server settings: flags > environment (DRAFTWISE_*, llama.cpp aliases) > defaults.

`ServeSettings` is read once at startup. The live subset (`LiveSettings`) can
be changed at run time through `PATCH /v1/settings`; everything else is fixed
for the life of the process. The width override variables are not settings
fields: the policy reads them (with their origins) from the environment that
the CLI passes in, so `known_env_vars()` adds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from drafter.files import model_reference
from policy import KNOWN_DRAFTER_KINDS, OVERRIDE_ENV_VARS
from server.blas import BLAS_ENV, REEXEC_MARKER

ENV_PREFIX = "DRAFTWISE_"
WORKER_OWNED_REASON = "owned by the model worker; restart required"
STARTUP_ONLY_REASON = "fixed at startup; restart required"
# The policy's kinds (each resolves its own width), and hybrid: DFlash with lookup beside it.
DRAFT_KINDS = (*KNOWN_DRAFTER_KINDS, "hybrid")
# Read by scripts/serve and scripts/test (which MLX backend extra to install), not at run time.
INSTALL_EXTRA_ENV = "DRAFTWISE_EXTRA"

LogLevel = Literal["debug", "info", "warning", "error"]
MaxTokens = Annotated[int, Field(ge=1)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
TimeoutSeconds = Annotated[float, Field(gt=0.0)]
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024

# Fields that also answer to a llama.cpp-style variable; the DRAFTWISE_ name wins.
ALIASES: dict[str, tuple[str, ...]] = {
    "model": ("LLAMA_ARG_MODEL",),
    "host": ("LLAMA_ARG_HOST",),
    "port": ("LLAMA_ARG_PORT",),
    "api_key": ("LLAMA_API_KEY",),
}


def env_names(field: str) -> tuple[str, ...]:
    """The environment variables that set `field`, highest precedence first."""
    return (ENV_PREFIX + field.upper(), *ALIASES.get(field, ()))


def _env(name: str) -> AliasChoices:
    return AliasChoices(*env_names(name))


def _model_dir(value: str | None) -> str | None:
    """A model setting names a saved model, or a Hugging Face model id (org/name, not a
    path here), which the loader resolves from the cache (drafter/loading.py)."""
    if value is None or model_reference(value) is not None:
        return value
    raise ValueError("is not a model directory (no config.json there) nor a model id (org/name)")


def split_origins(value: str) -> list[str]:
    return [origin.strip().rstrip("/") for origin in value.split(",") if origin.strip()]


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "draftwise"


class LiveSettings(BaseModel):
    """Settings a running server applies to the next request."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    default_max_tokens: MaxTokens = 16
    default_temperature: Temperature = 1.0
    default_top_p: TopP = 1.0
    request_timeout_s: TimeoutSeconds = 600.0
    log_level: LogLevel = "info"

    @field_validator("log_level", mode="before")
    @classmethod
    def _lowercase_level(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


LIVE_FIELDS: tuple[str, ...] = tuple(LiveSettings.model_fields)


Scope = Literal["live", "startup", "worker"]


def setting(
    default: Any = None, *, scope: Scope, help: str, aliased: str | None = None, **constraints: Any
) -> Any:
    """A ServeSettings field with its flag's help text and its scope: `live` (PATCH
    /v1/settings applies it), `startup` (fixed at startup) or `worker` (the model
    worker's; restart required). The CLI flags and the settings table read these.
    The environment name is DRAFTWISE_<FIELD>; `aliased` (the field's name) adds its
    llama.cpp-style names from ALIASES."""
    factory = constraints.pop("default_factory", None)
    kwargs: dict[str, Any] = {"description": help, "json_schema_extra": {"scope": scope}}
    if aliased is not None:
        kwargs["validation_alias"] = _env(aliased)
    if factory is not None:
        return Field(default_factory=factory, **kwargs, **constraints)
    return Field(default, **kwargs, **constraints)


class ServeSettings(BaseSettings):
    """Everything `draftwise serve` reads, each field declared once with its help and
    scope. Flags are passed as init values and win; the environment names are
    `env_names(field)`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, populate_by_name=True, extra="ignore", env_ignore_empty=True
    )

    model: str | None = setting(
        scope="worker",
        aliased="model",
        help="target model directory (mlx-lm format); default: the embedded pair",
    )
    draft_model: str | None = setting(
        scope="worker", help="DFlash drafter directory, or 'none' to serve classic decode"
    )
    draft_kind: str = setting(
        "dflash",
        scope="worker",
        help="drafter kind: dflash (a trained drafter, --draft-model), ngram (prompt "
        "lookup: drafts copied from the request's own tokens, no weights) or hybrid "
        "(dflash, whose round a long lookup match replaces)",
    )
    policy_file: Path | None = setting(
        scope="startup",
        help="calibration entries (JSON); default: the file draftwise calibrate wrote",
    )
    # strict: serve speculation only when byte-identical (require: its old name);
    # rounding: unless the probe finds a defect; warn: always; off: no probe.
    exactness: Literal["strict", "require", "rounding", "warn", "off"] = setting(
        "rounding",
        scope="startup",
        help="strict (alias require) | rounding | warn | off: serve speculation only "
        "when exact, unless a defect (default), always, or skip the probe",
    )
    cache_dir: Path = setting(
        default_factory=default_cache_dir,
        scope="startup",
        help="where generated/converted models are cached",
    )
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = setting(
        "auto", scope="startup", help="auto | float16 | bfloat16 | float32"
    )
    host: str = setting("127.0.0.1", scope="startup", help="listen address", aliased="host")
    port: int = setting(8080, scope="startup", help="listen port", aliased="port", ge=1, le=65535)
    api_key: str | None = setting(
        scope="startup",
        help="require this key as 'Authorization: Bearer KEY' on /v1/*",
        aliased="api_key",
    )
    max_queue_depth: int = setting(
        64, scope="startup", help="requests allowed to wait; beyond it, 429", ge=1
    )
    max_batch_size: int = setting(
        32,
        scope="worker",
        help="sequences (choices) decoded together in one batch; 1: one at a time",
        ge=1,
        le=256,
    )
    default_max_tokens: MaxTokens = setting(
        16, scope="live", help="max_tokens when a request omits it"
    )
    default_temperature: Temperature = setting(
        1.0, scope="live", help="temperature when a request omits it"
    )
    default_top_p: TopP = setting(1.0, scope="live", help="top_p when a request omits it")
    request_timeout_s: TimeoutSeconds = setting(
        600.0, scope="live", help="per-request deadline in seconds, queue wait included"
    )
    log_level: LogLevel = setting("info", scope="live", help="debug | info | warning | error")
    shutdown_grace_s: float = setting(
        60.0,
        scope="startup",
        help="on SIGTERM, how long in-flight requests may take to finish",
        ge=0.0,
    )
    max_body_bytes: int = setting(
        DEFAULT_MAX_BODY_BYTES,
        scope="startup",
        help="largest request body accepted; beyond it, 413",
        ge=1024,
    )
    cors_allow_origins: str = setting(
        "",
        scope="startup",
        help="comma-separated origins allowed by CORS, or '*'; empty: CORS off",
    )
    prompt_cache_bytes: int | None = setting(
        scope="worker",
        help="bytes of prompt state kept for reuse across requests; 0: off; "
        "default: a sixteenth of memory, at most 4 GiB",
        ge=0,
    )

    prompt_cache_hits: Literal["exact", "any"] = setting(
        "exact",
        scope="worker",
        help="exact: a hit restores only prompt rows that come out as a cold prefill computes "
        "them, checked at startup (where they do not, e.g. bf16 on a GPU, whole prefill "
        "chunks only); any: every shared prefix, so a hit may change output in "
        "rounding",
    )

    @field_validator("log_level", "exactness", "dtype", "prompt_cache_hits", mode="before")
    @classmethod
    def _lowercase(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("draft_kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in DRAFT_KINDS:
            raise ValueError(f"must be one of {', '.join(DRAFT_KINDS)}")
        return value

    @field_validator("draft_model")
    @classmethod
    def _none_means_no_drafter(cls, value: str | None) -> str | None:
        if value is not None and value.lower() == "none":
            return "none"
        return _model_dir(value)

    @field_validator("policy_file")
    @classmethod
    def _readable_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_file():
            raise ValueError("is not a file")
        return value

    @field_validator("model")
    @classmethod
    def _model_dir(cls, value: str | None) -> str | None:
        return _model_dir(value)

    @field_validator("cors_allow_origins")
    @classmethod
    def _origins(cls, value: str) -> str:
        for origin in split_origins(value):
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"{origin!r} is not an origin (http(s)://host[:port]) or '*'")
        return value

    def cors_origins(self) -> list[str]:
        """The allowed CORS origins; empty (the default) means CORS is off."""
        return split_origins(self.cors_allow_origins)

    def live(self) -> LiveSettings:
        return LiveSettings(**{name: getattr(self, name) for name in LIVE_FIELDS})


# The width override is not a ServeSettings field (the policy reads it, with its
# origin, from the flag and the environment) but it is a setting all the same.
DRAFT_BLOCK_SIZE = "draft_block_size"
DRAFT_BLOCK_SIZE_HELP = "draft block width override (beats every environment variable)"


@dataclass(frozen=True)
class SettingSpec:
    name: str
    scope: Scope
    type: str  # JSON type: "integer", "number" or "string"
    help: str


def json_type(annotation: Any) -> str:
    kinds = [a for a in (get_args(annotation) or (annotation,)) if a is not type(None)]
    if kinds and all(k is int for k in kinds):
        return "integer"
    if kinds and all(k in (int, float) for k in kinds):
        return "number"
    return "string"


def setting_specs() -> dict[str, SettingSpec]:
    """Every setting, from its one declaration: the CLI's flags, GET/PATCH
    /v1/settings and the docs' table are all derived from this."""
    specs: dict[str, SettingSpec] = {}
    for name, info in ServeSettings.model_fields.items():
        extra = info.json_schema_extra
        scope = cast(Scope, extra["scope"]) if isinstance(extra, dict) else "startup"
        specs[name] = SettingSpec(name, scope, json_type(info.annotation), info.description or "")
        if name == "draft_kind":  # the flag order: the width override beside the drafter
            specs[DRAFT_BLOCK_SIZE] = SettingSpec(
                DRAFT_BLOCK_SIZE, "worker", "integer", DRAFT_BLOCK_SIZE_HELP
            )
    return specs


def known_env_vars() -> set[str]:
    """Every environment variable the server reads, width overrides included."""
    names = {name for field in ServeSettings.model_fields for name in env_names(field)}
    return names | set(OVERRIDE_ENV_VARS) | {BLAS_ENV, REEXEC_MARKER, INSTALL_EXTRA_ENV}


def unknown_env_vars(environ: Mapping[str, str]) -> list[str]:
    """DRAFTWISE_* variables the server does not read (likely typos)."""
    known = known_env_vars()
    return sorted(n for n in environ if n.upper().startswith(ENV_PREFIX) and n.upper() not in known)
