"""Product layouts (drafter/linear.py): one layout at a time, chosen per device, for
the target and the drafter together, and a refused name changes nothing."""

from __future__ import annotations

from pathlib import Path

import mlx.nn as nn
import pytest

from drafter.columns import ColumnsEmbedding
from drafter.cpu_blas import AMD, bound_blas, cpu_vendor
from drafter.diagnostics import LINEAR_MODES
from drafter.forward import set_linear
from drafter.kernels import backend_bundle
from drafter.linear import LAYOUTS
from drafter.padded import PaddedEmbedding, PaddedLinear
from drafter.rowwise import RowwiseEmbedding, RowwiseLinear
from tests.drafter.conftest import Pair, engine_on

SWAPPED = {"rowwise": RowwiseEmbedding, "padded": PaddedEmbedding, "columns": ColumnsEmbedding}


def test_every_named_layout_has_a_table() -> None:
    assert tuple(LAYOUTS) == LINEAR_MODES


def test_on_cpu_the_layout_follows_the_bound_blas_and_the_vendor() -> None:
    # The tests run on MLX's CPU backend, in-process, with whichever BLAS pytest's
    # process bound (MKL only when preloaded).
    padded = bound_blas() == "mkl" and cpu_vendor() == AMD
    assert backend_bundle().kernels.linear == ("padded" if padded else "columns")


@pytest.mark.parametrize(
    ("text", "vendor"),
    [
        ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n", "AuthenticAMD"),
        ("processor\t: 0\nvendor_id\t: GenuineIntel\n", "GenuineIntel"),
        ("processor\t: 0\nBogoMIPS\t: 50.00\n", None),  # an ARM host names none
    ],
)
def test_the_cpu_vendor_is_read_from_cpuinfo(tmp_path: Path, text: str, vendor: str | None) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert cpu_vendor(str(path)) == vendor
    assert cpu_vendor(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("first", LINEAR_MODES)
@pytest.mark.parametrize("second", LINEAR_MODES)
def test_a_layout_replaces_the_one_before_it(first: str, second: str) -> None:
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 8, bias=False))
    embed, linear = model.layers
    set_linear(model, first)
    set_linear(model, second)
    assert type(embed) is SWAPPED.get(second, nn.Embedding)
    want_linear = {"rowwise": RowwiseLinear, "padded": PaddedLinear}.get(second, nn.Linear)
    assert type(linear) is want_linear
    assert "_columns" not in embed.__dict__ and "_operands" not in linear.__dict__


def test_an_unknown_layout_is_refused_and_changes_nothing() -> None:
    model = nn.Sequential(nn.Linear(16, 8, bias=False))
    set_linear(model, "padded")
    with pytest.raises(ValueError, match="'sideways' is none of"):
        set_linear(model, "sideways")
    assert type(model.layers[0]) is PaddedLinear


def test_the_engine_sets_one_layout_for_target_and_drafter(pair: Pair) -> None:
    engine = engine_on(pair, pair.drafter, 4)
    assert engine.linear == backend_bundle().kernels.linear
    for mode in LINEAR_MODES:
        engine.use(linear=mode)
        assert engine.linear == mode
        assert type(pair.model.model.embed_tokens) is SWAPPED.get(mode, nn.Embedding)
        for model in (pair.model, pair.drafter.model):
            types = {type(m) for m in model.modules()}
            assert (PaddedLinear in types) == (mode == "padded")
            assert (RowwiseLinear in types) == (mode == "rowwise")
