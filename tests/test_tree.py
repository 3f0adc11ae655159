"""The product tree holds the product: few scripts, and code that speaks in the present
tense (no session numbers)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("drafter", "server", "policy")


def test_scripts_hold_at_most_fifteen_files() -> None:
    files = [path for path in (ROOT / "scripts").rglob("*") if path.is_file()]
    assert len(files) <= 15, sorted(str(path.relative_to(ROOT)) for path in files)


def test_no_product_code_names_a_session() -> None:
    pattern = re.compile(r"\bsessions? \d+", re.IGNORECASE)
    named = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert named == []
