"""policy/ stays pure: stdlib only, no MLX, no environment reads."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

POLICY = Path(__file__).resolve().parents[2] / "policy"


def imported_roots(source: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_policy_imports_only_the_standard_library_and_itself() -> None:
    for path in POLICY.glob("*.py"):
        foreign = {
            root
            for root in imported_roots(path.read_text())
            if root != "policy" and root not in sys.stdlib_module_names
        }
        assert foreign == set(), path.name


def test_policy_never_reads_the_environment() -> None:
    for path in POLICY.glob("*.py"):
        assert "os" not in imported_roots(path.read_text()), path.name


def test_importing_policy_loads_no_mlx() -> None:
    code = (
        "import sys, policy, policy.explain; print(any(m.startswith('mlx') for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=POLICY.parent, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
