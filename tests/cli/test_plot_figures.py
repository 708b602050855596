"""``megadump plot``: real PNGs from real demo dumps, and the matplotlib figures behind them (colormap,
norm centre, colour bar label, title), A−B heatmaps, error maps and output claiming."""

from __future__ import annotations

import os
from pathlib import Path
import shutil

from matplotlib.colors import CenteredNorm, TwoSlopeNorm
from matplotlib.figure import Figure
import numpy as np
import pytest

from megadump_zarr.analyse import compare
from megadump_zarr.read import open_dump
from tests._layout import stored_record
from tests.cli._helpers import assert_input_error

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def bf16(tmp_path_factory):
    from megadump_zarr.demo.run import run_demo

    return run_demo(tmp_path_factory.mktemp("bf16plot") / "run", steps=2, dtype="bfloat16")


@pytest.fixture(scope="module")
def drifting(demo, tmp_path_factory) -> Path:
    """The demo's L1 dump with expert 1's expert_down output of invocation 2 shifted by +3 (one task drifts)."""
    copy = tmp_path_factory.mktemp("drift") / "l1"
    shutil.copytree(demo.roots["L1"], copy)
    records = open_dump(copy).records()
    row = records[
        (records["stage"] == "expert_down")
        & (records["io"] == "output")
        & (records["invocation"] == 2)
        & (records["owner_id"] == 1)
    ].iloc[0]
    array, index = stored_record(copy, row["path"])
    array[index] = array[index] + 3.0
    return copy


@pytest.fixture
def figures(monkeypatch) -> list[Figure]:
    """Every figure ``megadump plot`` saves (the real savefig runs)."""
    saved: list[Figure] = []
    original = Figure.savefig

    def spy(self: Figure, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return saved


def _png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000


def _heatmap_parts(figure: Figure):
    ax, bar_ax = figure.axes
    (image,) = ax.images
    return ax, image, bar_ax.get_ylabel()


def test_diff_heatmap_is_diverging_and_centred_on_zero(cli, demo, bf16, tmp_path, figures):
    out = tmp_path / "diff.png"
    result = cli(
        "plot",
        bf16.roots["L1"],
        "ws",
        "--stage",
        "expert_up",
        "--invocation",
        "2",
        "--diff",
        demo.roots["L1"],
        "-o",
        out,
    )
    assert result.code == 0, result.err
    _png(out)
    ax, image, label = _heatmap_parts(figures[-1])
    assert image.cmap.name.startswith("RdBu_r")
    assert isinstance(image.norm, CenteredNorm) and image.norm.vcenter == 0
    assert image.norm.vmin == pytest.approx(-image.norm.vmax) and image.norm.vmax > 0
    assert label == "A − B (ws)"
    title = ax.get_title()
    for fragment in ("ws", "window 0", "invocation 2", "step 1", "stage expert_up", "A − B", "bfloat16 vs float32"):
        assert fragment in title, (fragment, title)
    a = open_dump(bf16.roots["L1"]).tensor("ws", stage="expert_up", invocation=2)
    b = open_dump(demo.roots["L1"]).tensor("ws", stage="expert_up", invocation=2)
    expected = np.asarray(a.values, dtype=np.float64) - np.asarray(b.values, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(image.get_array()), expected, rtol=1e-6, atol=1e-9)
    assert image.norm.vmax == pytest.approx(np.abs(expected).max())


def test_signed_data_diverges_and_one_signed_data_does_not(cli, demo, tmp_path, figures):
    signed = cli("plot", demo.roots["L1"], "ws", "--stage", "expert_up", "--invocation", "0", "-o", tmp_path / "ws.png")
    assert signed.code == 0, signed.err
    ax, image, label = _heatmap_parts(figures[-1])
    assert image.cmap.name.startswith("RdBu_r") and isinstance(image.norm, TwoSlopeNorm) and image.norm.vcenter == 0
    shown = np.ma.filled(image.get_array(), np.nan)
    top = float(np.nanmax(np.abs(shown)))
    assert np.nanmin(shown) < 0 < np.nanmax(shown) and abs(np.nanmin(shown)) != abs(np.nanmax(shown))
    assert image.norm.vmin == -image.norm.vmax == -top, "a signed heatmap's scale is ±max|x|, centred on 0"
    assert label == "ws (float32)"
    assert "window 0 · invocation 0 · step 0 · stage expert_up" in ax.get_title()
    path = open_dump(demo.roots["L0"]).records().query("name == 'norm_weight'").iloc[0]["path"]
    positive = cli("plot", demo.roots["L0"], path, "-o", tmp_path / "nw.png")
    assert positive.code == 0, positive.err
    ax, image, label = _heatmap_parts(figures[-1])
    assert image.cmap.name.startswith("viridis") and not isinstance(image.norm, (TwoSlopeNorm, CenteredNorm))
    assert label == "norm_weight (float32)"
    assert "norm_weight · window 0 · invocation 0 · step 1 · kernel moe_router" in ax.get_title()
    _png(tmp_path / "nw.png")


def test_hist_of_a_difference(cli, demo, bf16, tmp_path, figures):
    out = tmp_path / "h.png"
    result = cli(
        "plot",
        bf16.roots["L0"],
        "x",
        "--invocation",
        "0",
        "--diff",
        demo.roots["L0"],
        "--kind",
        "hist",
        "-o",
        out,
        "--json",
    )
    assert result.code == 0, result.err
    assert result.json()["kind"] == "hist" and result.json()["diff"] == str(demo.roots["L0"])
    (ax,) = figures[-1].axes
    assert ax.get_title().startswith("x (A − B) · window 0 · invocation 0")
    assert sum(p.get_height() for p in ax.patches) == 37 * 16
    _png(out)


@pytest.mark.parametrize("by", ["owner", "core"])
def test_error_map_shows_which_expert_drifts(cli, demo, drifting, tmp_path, figures, by):
    out = tmp_path / f"errormap_{by}.png"
    result = cli("plot", drifting, "--diff", demo.roots["L1"], "--kind", "errormap", "--by", by, "-o", out, "--json")
    assert result.code == 0, result.err
    _png(out)
    report = result.json()
    result_frame = compare(drifting, demo.roots["L1"])
    ax, bar_ax = figures[-1].axes
    (image,) = ax.images
    assert bar_ax.get_ylabel().startswith("worst max_rel")
    assert "worst max_rel per stage × " + by in ax.get_title() and "1 of " in ax.get_title()
    expected_span = " · ".join(
        f"{key}{'s' if result_frame[key].nunique() > 1 else ''} "
        + ", ".join(str(v) for v in sorted(result_frame[key].dropna().unique()))
        for key in ("window", "invocation", "step")
    )
    assert ax.get_title().splitlines()[0] == f"{drifting} vs {demo.roots['L1']} · {expected_span}"  # what it covers
    stages = [t.get_text() for t in ax.get_yticklabels()]
    columns = [t.get_text() for t in ax.get_xticklabels()]
    assert stages == report["stages"] == ["expert_up", "expert_down", "expert_up_bwd"]
    expected_columns = ["0", "1"] if by == "owner" else ["AIC0", "AIC1", "MIX0", "MIX1"]
    assert columns == report["columns"] == expected_columns
    grid = np.full((len(stages), len(columns)), np.nan)
    for row in result_frame.itertuples():
        key = str(int(row.owner_id)) if by == "owner" else f"{row.core_type}{int(row.core_id)}"
        i, j = stages.index(row.stage), columns.index(key)
        if not np.isnan(row.max_rel):
            grid[i, j] = row.max_rel if np.isnan(grid[i, j]) else max(grid[i, j], row.max_rel)
    np.testing.assert_allclose(np.asarray(report["worst"], dtype=float), grid)
    failing = np.argwhere(np.asarray(report["failures"]) > 0).tolist()
    drift_column = columns.index("1" if by == "owner" else "AIC1")
    assert failing == [[stages.index("expert_down"), drift_column]]
    assert any(t.get_text().startswith("✗") for t in ax.texts)


def test_error_map_input_errors(cli, demo, tmp_path):
    out = tmp_path / "e.png"
    assert_input_error(cli("plot", demo.roots["L1"], "--kind", "errormap", "-o", out), "--diff")
    assert_input_error(
        cli("plot", demo.roots["L1"], "ws", "--kind", "errormap", "--diff", demo.roots["L1"], "-o", out),
        "not a SELECTOR",
    )
    assert_input_error(
        cli("plot", demo.roots["L0"], "--kind", "errormap", "--diff", demo.roots["L0"], "-o", out),
        "error maps need L1 dumps",
    )
    assert not out.exists()


def test_outputs_are_claimed_never_clobbered(cli, demo, tmp_path):
    out = tmp_path / "ws.png"
    args = ("plot", demo.roots["L1"], "ws", "--stage", "expert_up", "--invocation", "0", "-o", out)
    assert cli(*args).code == 0
    out.write_bytes(b"keep me")
    assert_input_error(cli(*args), "already exists", "--overwrite")
    assert out.read_bytes() == b"keep me"
    assert cli(*args, "--overwrite").code == 0
    _png(out)
    link = tmp_path / "link.png"
    os.symlink(out, link)
    assert_input_error(cli(*args[:-1], link, "--overwrite"), "symbolic link")
    directory = tmp_path / "dir.png"
    directory.mkdir()
    assert_input_error(cli(*args[:-1], directory, "--overwrite"), "directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.png", "link.png", "ws.png"]  # no temporary left
    assert_input_error(cli(*args[:-1], tmp_path / "x.bogus"), "unknown image format")


def test_diff_of_different_shapes_is_refused(cli, demo, bf16, tmp_path):
    out = tmp_path / "x.png"
    result = cli(
        "plot",
        bf16.roots["L1"],
        "ws",
        "--stage",
        "expert_up",
        "--invocation",
        "0",
        "--owner",
        "0",
        "--diff",
        demo.roots["L1"],
        "--owner",
        "0",
        "-o",
        out,
    )
    assert result.code in (0, 2)  # equal routing: drawn; different routing: refused with shapes named
    if result.code == 2:
        assert "shapes differ" in result.err or "different" in result.err
    else:
        _png(out)


def test_library_heatmap_of_a_stitched_tensor_names_where_it_was_captured(demo):
    from megadump_zarr.analyse.plot import plot_heatmap

    ws = open_dump(demo.roots["L1"]).tensor("ws", stage="expert_up", invocation=2)
    assert ws.attrs["step"] == 1
    ax = plot_heatmap(ws, Figure().add_subplot())
    assert ax.get_title().startswith("ws · window 0 · invocation 2 · step 1 · stage expert_up\n[23×16] float32")
    assert ax.figure.axes[1].get_ylabel() == "ws (float32)"


def _lightness(rgba) -> float:
    r, g, b = rgba[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_signed_heatmap_scale_is_symmetric_so_small_negatives_stay_light():
    from megadump_zarr.analyse.plot import plot_heatmap

    ax = plot_heatmap(np.array([[-0.28, 2.95], [0.0, 1.0]]), Figure().add_subplot())
    (image,) = ax.images
    assert isinstance(image.norm, TwoSlopeNorm) and image.norm.vcenter == 0
    assert image.norm.vmin == -2.95 and image.norm.vmax == 2.95
    low, high = image.cmap(image.norm(-0.28)), image.cmap(image.norm(2.95))
    assert _lightness(low) > _lightness(high) + 0.3, (low, high)
    assert image.norm(-2.95) == pytest.approx(0.0) and image.norm(0.0) == pytest.approx(0.5)


def test_error_map_cells_of_exactly_zero_are_white():
    import pandas as pd

    from megadump_zarr.analyse.errormap_plot import plot_error_map

    for values in ([0.0, 0.5, 2.0], [0.0, 1e-6, 2.0]):  # linear and logarithmic scales
        table = pd.DataFrame({"stage": ["s", "s", "s"], "owner_id": [0, 1, 2], "max_rel": values, "failing": [0, 1, 1]})
        ax = plot_error_map(table, Figure().add_subplot(), by="owner")
        (image,) = ax.images
        rgba = image.cmap(image.norm(np.ma.filled(image.get_array(), np.nan)))
        assert tuple(rgba[0, 0]) == (1.0, 1.0, 1.0, 1.0), values
        assert _lightness(rgba[0, 2]) < 0.5 and tuple(rgba[0, 1]) != (1.0, 1.0, 1.0, 1.0)


@pytest.mark.parametrize("stage", [None, "", float("nan")])
def test_a_title_without_a_stage_names_the_kernel_never_a_bare_stage(stage):
    from megadump_zarr.analyse.plot import heatmap_title

    title = heatmap_title("ys", {"window": 0, "invocation": 2, "step": 0, "stage": stage, "kernel": "moe_experts"})
    assert title == "ys · window 0 · invocation 2 · step 0 · kernel moe_experts"


def test_error_map_of_a_kernel_without_owners_is_by_core(cli, tmp_path, figures):
    from tests._mlp import dump_pair

    a, b = dump_pair(tmp_path / "mlp")
    out = tmp_path / "errormap.png"
    result = cli("plot", a, "--diff", b, "--kind", "errormap", "-o", out, "--json")
    assert result.code == 0, result.err
    assert "these records have no owners: the error map is by core" in result.err
    report = result.json()
    assert report["by"] == "core" and report["stages"] == ["matmul", "gelu"]
    assert np.asarray(report["failures"]).sum() == 4  # x and h of task 3, h and y of task 7
    _png(out)
