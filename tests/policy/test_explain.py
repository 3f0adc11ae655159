"""`policy explain`: the resolution for any host, printed without loading a model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from policy.__main__ import main

REPO = Path(__file__).resolve().parents[2]
GB10_REASON = (
    "reason: cuda 12.1 affine dflash: measured "
    "(docs/benchmark_results/gb10-qwen3.5-4b-4bit-dflash-published.md, mlx 81ba1c6a)"
)


def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["explain", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_explain_prints_the_gb10_measured_width_and_its_record(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = explain(
        capsys, "--backend", "cuda", "--compute-capability", "12.1", "--quant", "affine"
    )
    assert code == 0
    assert out.splitlines() == ["width: 4", "source: policy", GB10_REASON]


def test_explain_prints_the_default_for_an_unmeasured_host(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = explain(capsys, "--backend", "metal", "--drafter-kind", "dflash")
    assert code == 0
    assert out.splitlines() == [
        "width: 16",
        "source: default",
        "reason: metal unquantized dflash: no measured entry; dflash default",
    ]


def test_explain_gives_this_cpus_measured_answer_and_its_record(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = explain(capsys, "--backend", "cpu", "--drafter-kind", "dflash")
    assert code == 0
    assert out.splitlines()[:2] == ["width: 3", "source: policy"]
    assert "docs/benchmark_results/cpu-short-prompts.md" in out


def test_explain_gives_a_cpu_with_mkl_its_own_entry(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = explain(capsys, "--backend", "cpu", "--blas", "mkl")
    assert code == 0
    assert out.splitlines()[:2] == ["width: 4", "source: policy"]
    assert "reason: cpu mkl unquantized dflash: measured" in out
    assert "docs/benchmark_results/cpu-heldout24-w3-w4-blk8.md" in out


def test_explain_refuses_a_blas_off_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = explain(capsys, "--backend", "cuda", "--blas", "mkl")
    assert (code, out) == (2, "")
    assert err.startswith("error: blas applies to cpu only, not cuda")


def test_explain_shows_the_winning_override_and_the_ignored_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = explain(
        capsys,
        *("--backend", "cuda", "--compute-capability", "12.1", "--quant", "affine"),
        *("--draft-block-size", "8", "--env", "LLAMA_ARG_DRAFT_BLOCK_SIZE=4"),
    )
    assert code == 0
    assert out.splitlines() == [
        "width: 8",
        "source: flag",
        "reason: flag --draft-block-size=8 (ignored: env:LLAMA_ARG_DRAFT_BLOCK_SIZE=4)",
        "ignored: env:LLAMA_ARG_DRAFT_BLOCK_SIZE=4",
    ]


def test_explain_takes_checkpoint_and_maximum_widths(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = explain(capsys, "--backend", "metal", "--checkpoint-width", "6", "--max-width", "8")
    assert out.splitlines()[:2] == ["width: 6", "source: checkpoint"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--env", "MLXCEL_DRAFT_BLOCK_SIZE=abc"],
            "MLXCEL_DRAFT_BLOCK_SIZE='abc' is not an integer",
        ),
        (["--draft-block-size", "1"], "--draft-block-size='1' is below 2"),
        (["--env", "DRAFT=4"], "--env DRAFT is not one of"),
        (["--compute-capability", "9.0"], "compute capability applies to cuda only, not cpu"),
    ],
)
def test_explain_reports_a_bad_input_and_exits_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = explain(capsys, "--backend", "cpu", *argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {message}")


def test_explain_rejects_a_malformed_compute_capability(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "--backend", "cuda", "--compute-capability", "sm_90"])
    assert exit_info.value.code == 2
    assert "'sm_90' is not MAJOR.MINOR" in capsys.readouterr().err


def test_python_dash_m_policy_explain_runs_as_a_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "policy", "explain", "--backend", "cuda"]
        + ["--compute-capability", "12.1", "--quant", "affine"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.splitlines()[0] == "width: 4"
