"""Server settings: flags > environment (DRAFTWISE_*, llama.cpp aliases) > defaults.

`ServeSettings` is read once at startup. The live subset (`LiveSettings`) can
be changed at run time through `PATCH /v1/settings`; everything else is fixed
for the life of the process. The width override variables are not settings
fields: the policy reads them (with their origins) from the environment that
the CLI passes in, so `known_env_vars()` adds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from policy import KNOWN_DRAFTER_KINDS, OVERRIDE_ENV_VARS
from server.blas import BLAS_ENV, REEXEC_MARKER

ENV_PREFIX = "DRAFTWISE_"
WORKER_OWNED_REASON = "owned by the model worker; restart required"
STARTUP_ONLY_REASON = "fixed at startup; restart required"
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
    """A model setting must name a saved model (hub downloads are not supported)."""
    if value is not None and not (Path(value).expanduser() / "config.json").is_file():
        raise ValueError("is not a model directory (no config.json there)")
    return value


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


class ServeSettings(BaseSettings):
    """Everything `draftwise serve` reads. Flags are passed as init values and win."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, populate_by_name=True, extra="ignore", env_ignore_empty=True
    )

    model: str | None = Field(None, validation_alias=_env("model"))
    draft_model: str | None = Field(None, validation_alias=_env("draft_model"))
    draft_kind: str = Field("dflash", validation_alias=_env("draft_kind"))
    policy_file: Path | None = Field(None, validation_alias=_env("policy_file"))
    # strict: serve speculation only when byte-identical (require: its old name);
    # rounding: unless the probe finds a defect; warn: always; off: no probe.
    exactness: Literal["strict", "require", "rounding", "warn", "off"] = Field(
        "rounding", validation_alias=_env("exactness")
    )
    cache_dir: Path = Field(default_factory=default_cache_dir, validation_alias=_env("cache_dir"))
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", validation_alias=_env("dtype")
    )
    host: str = Field("127.0.0.1", validation_alias=_env("host"))
    port: int = Field(8080, ge=1, le=65535, validation_alias=_env("port"))
    api_key: str | None = Field(None, validation_alias=_env("api_key"))
    max_queue_depth: int = Field(64, ge=1, validation_alias=_env("max_queue_depth"))
    default_max_tokens: MaxTokens = Field(16, validation_alias=_env("default_max_tokens"))
    default_temperature: Temperature = Field(1.0, validation_alias=_env("default_temperature"))
    default_top_p: TopP = Field(1.0, validation_alias=_env("default_top_p"))
    request_timeout_s: TimeoutSeconds = Field(600.0, validation_alias=_env("request_timeout_s"))
    log_level: LogLevel = Field("info", validation_alias=_env("log_level"))
    shutdown_grace_s: float = Field(60.0, ge=0.0, validation_alias=_env("shutdown_grace_s"))
    max_body_bytes: int = Field(
        DEFAULT_MAX_BODY_BYTES, ge=1024, validation_alias=_env("max_body_bytes")
    )
    cors_allow_origins: str = Field("", validation_alias=_env("cors_allow_origins"))
    # None: a sixteenth of the machine's memory, at most 4 GiB; 0: no prompt cache
    prompt_cache_bytes: int | None = Field(None, ge=0, validation_alias=_env("prompt_cache_bytes"))

    @field_validator("log_level", "exactness", "dtype", mode="before")
    @classmethod
    def _lowercase(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("draft_kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in KNOWN_DRAFTER_KINDS:
            raise ValueError(f"must be one of {', '.join(KNOWN_DRAFTER_KINDS)}")
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


def known_env_vars() -> set[str]:
    """Every environment variable the server reads, width overrides included."""
    names = {name for field in ServeSettings.model_fields for name in env_names(field)}
    return names | set(OVERRIDE_ENV_VARS) | {BLAS_ENV, REEXEC_MARKER, INSTALL_EXTRA_ENV}


def unknown_env_vars(environ: Mapping[str, str]) -> list[str]:
    """DRAFTWISE_* variables the server does not read (likely typos)."""
    known = known_env_vars()
    return sorted(n for n in environ if n.upper().startswith(ENV_PREFIX) and n.upper() not in known)
