"""The serving path loads no measurement tooling (server/tooling/) and no test fixture."""

from __future__ import annotations

import subprocess
import sys

TOOLING = ("server.tooling", "drafter.checkpoints.tiny")  # tooling, and a test fixture


def test_the_app_and_the_serve_path_import_no_benchmark_calibration_or_load_test_module() -> None:
    code = (
        "import sys, server.app, server.serve, server.worker\n"
        f"bad = sorted(m for m in sys.modules if m.startswith({TOOLING!r}))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
