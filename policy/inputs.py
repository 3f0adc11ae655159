"""The policy's inputs: the device it runs on and the operator's overrides."""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS: tuple[str, ...] = ("cuda", "metal", "cpu")
QUANT_MODES: tuple[str, ...] = ("affine", "mxfp4", "nvfp4", "mxfp8")
# The BLAS families MLX's CPU matmul can bind to. A few-row verify forward costs so
# differently under each (docs/benchmark_results/cpu-blas-mkl.md) that a CPU entry may
# name one; "reference" is the netlib BLAS the MLX wheel bundles.
CPU_BLAS: tuple[str, ...] = ("mkl", "openblas", "blis", "accelerate", "reference")

FLAG_NAME = "--draft-block-size"
OVERRIDE_ENV_VARS: tuple[str, ...] = (
    "DRAFTWISE_DRAFT_BLOCK_SIZE",
    "LLAMA_ARG_DRAFT_BLOCK_SIZE",
    "MLXCEL_DRAFT_BLOCK_SIZE",
)
# Highest precedence first.
OVERRIDE_ORIGINS: tuple[str, ...] = ("flag", *(f"env:{name}" for name in OVERRIDE_ENV_VARS))


class PolicyError(ValueError):
    """A width input that must stop startup; the message names the input and its value."""


@dataclass(frozen=True)
class Device:
    """The backend and what sets its speed within it: the compute capability on CUDA,
    the BLAS on CPU (None when unknown)."""

    backend: str
    compute_capability: tuple[int, int] | None = None
    blas: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise PolicyError(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.compute_capability is not None and self.backend != "cuda":
            raise PolicyError(f"compute capability applies to cuda only, not {self.backend}")
        if self.blas is not None and self.backend != "cpu":
            raise PolicyError(f"blas applies to cpu only, not {self.backend}")
        if self.blas is not None and self.blas not in CPU_BLAS:
            raise PolicyError(f"blas {self.blas!r} is not one of {', '.join(CPU_BLAS)}")

    def describe(self) -> str:
        if self.backend == "cpu" and self.blas is not None:
            return f"cpu {self.blas}"
        if self.backend != "cuda":
            return self.backend
        if self.compute_capability is None:
            return "cuda (compute capability unknown)"
        major, minor = self.compute_capability
        return f"cuda {major}.{minor}"


@dataclass(frozen=True)
class Override:
    origin: str
    raw: str

    def __post_init__(self) -> None:
        if self.origin not in OVERRIDE_ORIGINS:
            raise PolicyError(f"unknown override origin {self.origin!r}")

    @property
    def name(self) -> str:
        """The flag or variable the operator set."""
        return FLAG_NAME if self.origin == "flag" else self.origin.removeprefix("env:")

    def describe(self) -> str:
        if self.origin == "flag":
            return f"flag {FLAG_NAME}={self.raw}"
        return f"{self.origin}={self.raw}"


def describe_quantization(quantization: str | None) -> str:
    return "unquantized" if quantization is None else quantization
