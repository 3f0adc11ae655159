"""The serving path loads no measurement tooling (server/tooling/) and no test fixture:
neither the app nor the `draftwise` console entry (server.cli), parsing `serve`."""

from __future__ import annotations

import subprocess
import sys

TOOLING = ("server.tooling", "drafter.checkpoints.tiny")  # tooling, and a test fixture


def loaded_tooling(setup: str) -> subprocess.CompletedProcess[str]:
    code = (
        f"import sys\n{setup}\n"
        f"bad = sorted(m for m in sys.modules if m.startswith({TOOLING!r}))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_app_and_the_serve_path_import_no_benchmark_calibration_or_load_test_module() -> None:
    result = loaded_tooling("import server.app, server.serve, server.worker")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_console_entry_parsing_serve_imports_no_tooling() -> None:
    result = loaded_tooling(
        "import server.cli\nserver.cli.parse_args(['serve', '--port', '1'])\n"
        "server.cli.parse_args(['policy', 'explain', '--backend', 'cpu'])"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_tooling_command_loads_its_own_module_only() -> None:
    result = loaded_tooling("import server.cli\nserver.cli.parse_args(['profile'])")
    assert result.returncode == 1
    assert "server.tooling.profile" in result.stdout
    assert "server.tooling.bench'" not in result.stdout
