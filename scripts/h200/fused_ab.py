"""H200: does fusing sibling products (drafter/fused.py) make a round or a classic
step cheaper? One process, arms interleaved.

Arm "unfused" serves q/k/v and gate/up as five products a layer (the tree before
drafter/fused.py); arm "fused" as two, in the classic step and the round alike. Each
arm sets `Engine.fused_linear`, then runs `draftwise profile`'s width-8 measurement;
the arms alternate (AB, BA, ...) for n passes. One JSON line per measurement on
stdout. argv: n (default 10), tokens (default 128)."""

from __future__ import annotations

import sys

from ab import alternate, width8_engine

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128

engine = width8_engine()


def use(fused: bool) -> None:
    engine.fused_linear = fused


alternate(engine, {"unfused": lambda: use(False), "fused": lambda: use(True)}, N, TOKENS)
