"""Issue 12.10's list of inputs that gave tracebacks: each now ends as one ``error:`` line naming the file and
field (exit 2), on a real demo dump whose window document is edited the way the list says."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
import shutil
import socket
from typing import Any, Callable

import pytest

from tests.cli._helpers import assert_input_error

WINDOW = "rank_0/window_0000"
X = "invocation_000000_forward/x"
INV = "invocation_000000_forward"


def _array(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["consolidated_metadata"]["metadata"][X]


def _inv(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["consolidated_metadata"]["metadata"][INV]["attributes"]


X_DOC = f"{WINDOW}/{X}/zarr.json"
INV_DOC = f"{WINDOW}/{INV}/zarr.json"
CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "window attributes a list",
        lambda d: d.__setitem__("attributes", [1, 2]),
        f"{WINDOW}/zarr.json: attributes [1, 2] is not a JSON object",
    ),
    (
        "invocation attributes a list",
        lambda d: d["consolidated_metadata"]["metadata"][INV].__setitem__("attributes", [1]),
        f"{INV_DOC}: attributes [1] is not a JSON object",
    ),
    (
        "consolidated entry a string",
        lambda d: d["consolidated_metadata"]["metadata"].__setitem__(X, "abc"),
        f"consolidated_metadata.metadata['{X}'] 'abc' is not a JSON object",
    ),
    (
        "consolidated entry a list",
        lambda d: d["consolidated_metadata"]["metadata"].__setitem__(X, [1]),
        f"consolidated_metadata.metadata['{X}'] '[1]' is not a JSON object",
    ),
    ("shape null", lambda d: _array(d).__setitem__("shape", None), f"{X_DOC}: shape None is not a list"),
    (
        "shape [None, 16]",
        lambda d: _array(d).__setitem__("shape", [None, 16]),
        f"{X_DOC}: shape [None, 16] is not a list",
    ),
    ("shape [1.5, 16]", lambda d: _array(d).__setitem__("shape", [1.5, 16]), f"{X_DOC}: shape [1.5, 16] is not a list"),
    ("shape [2**62, 16]", lambda d: _array(d).__setitem__("shape", [2**62, 16]), "more than int64 can count"),
    (
        "actualShape [[1]]",
        lambda d: _array(d)["attributes"].__setitem__("actualShape", [[1]]),
        f"{X_DOC}: attributes.actualShape [[1]] is not a list",
    ),
    (
        "fullBytes a mapping",
        lambda d: _array(d)["attributes"].__setitem__("fullBytes", {"a": 1}),
        f"{X_DOC}: attributes.fullBytes {{'a': 1}} is not an integer",
    ),
    (
        "storedBytes a list",
        lambda d: _array(d)["attributes"].__setitem__("storedBytes", [1]),
        f"{X_DOC}: attributes.storedBytes [1] is not an integer",
    ),
    (
        "stats a list",
        lambda d: _array(d)["attributes"].__setitem__("stats", [1]),
        f"{X_DOC}: attributes.stats '[1]' is not",
    ),
    (
        "nanCount a list",
        lambda d: _array(d)["attributes"]["stats"].__setitem__("nanCount", [1]),
        f"{X_DOC}: attributes.stats.nanCount [1] is not an integer",
    ),
    (
        "infCount 2**70",
        lambda d: _array(d)["attributes"]["stats"].__setitem__("infCount", 2**70),
        f"{X_DOC}: attributes.stats.infCount {2**70} is not an integer >= 0 within int64",
    ),
    (
        "invocationId a list",
        lambda d: _inv(d).__setitem__("invocationId", [1]),
        f"{INV_DOC}: attributes.invocationId [1] is not an integer",
    ),
    (
        "step a mapping",
        lambda d: _inv(d).__setitem__("step", {"a": 1}),
        f"{INV_DOC}: attributes.step {{'a': 1}} is not",
    ),
    ("codecs a string", lambda d: _array(d).__setitem__("codecs", "abc"), f"{X_DOC}: codecs 'abc' is not a list"),
    ("dimension_names 5", lambda d: _array(d).__setitem__("dimension_names", 5), f"{X_DOC}: dimension_names 5 is not"),
    (
        "fill_value abc",
        lambda d: _array(d).__setitem__("fill_value", "abc"),
        f"{WINDOW}/{X}/zarr.json is not a valid Zarr v3 array document",
    ),
    (
        "chunk_shape [0, 0]",
        lambda d: _array(d)["chunk_grid"]["configuration"].__setitem__("chunk_shape", [0, 0]),
        f"{X_DOC}: chunk_grid",
    ),
]


@pytest.fixture
def l0(demo, tmp_path: Path) -> Path:
    root = tmp_path / "l0"
    shutil.copytree(demo.roots["L0"], root)
    return root


@pytest.mark.parametrize("name,change,message", CASES, ids=[c[0] for c in CASES])
def test_damaged_document(l0: Path, cli, name: str, change: Callable[[dict[str, Any]], None], message: str) -> None:
    document = l0 / WINDOW / "zarr.json"
    doc = json.loads(document.read_text())
    change(doc)
    document.write_text(json.dumps(doc))
    assert_input_error(cli("show", l0, "x", "--invocation", "0"), message)
    result = cli("verify", l0)
    assert result.code == 1 and "Traceback" not in result.err + result.out


def test_window_directory_beyond_int64(l0: Path, cli) -> None:
    shutil.copytree(l0 / WINDOW, l0 / "rank_0" / "window_99999999999999999999")
    for command in ("info", "ls", "stats"):
        assert_input_error(cli(command, l0), "rank_0/window_99999999999999999999: a rank or window index beyond int64")
    result = cli("verify", l0)
    assert result.code == 1 and "indices within int64" in result.out


def test_head_beyond_int64(l0: Path, cli) -> None:
    assert_input_error(cli("show", l0, "x", "--invocation", "0", "--head", 2**64), f"--head {2**64} is out of range")


@pytest.mark.parametrize(
    "option,message",
    [
        ("endpoint_url=5", "-S endpoint_url: expected a string, got 5"),
        ("client_kwargs=abc", "-S client_kwargs: expected a JSON object"),
        ("anon=3", "-S anon: expected true or false"),
    ],
)
def test_typed_storage_options(cli, option: str, message: str) -> None:
    assert_input_error(cli("ls", "s3://bucket/run", "-S", option), message)


def test_unknown_storage_option_and_unreachable_endpoint(cli) -> None:
    pytest.importorskip("s3fs")
    with socket.socket() as listening:  # an endpoint that accepts connections: the option itself is refused
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        endpoint = f"http://127.0.0.1:{listening.getsockname()[1]}"
        assert_input_error(
            cli("ls", "s3://bucket/run", "-S", "bogus=1", "-S", f"endpoint_url={endpoint}"),
            "storage option 'bogus' is not an option of s3fs.S3FileSystem",
            "options it takes: anon, ",
        )
    with socket.socket() as probe:  # a port nothing listens on: refused at once, no retries
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for command in (("ls", "s3://bucket/run"), ("verify", "s3://bucket/run")):
        result = cli(
            *command, "-S", f"endpoint_url=http://127.0.0.1:{port}", "-S", "key=k", "-S", "secret=never-shown-secret"
        )
        assert_input_error(
            result,
            f"cannot reach the object store endpoint http://127.0.0.1:{port} for s3://bucket/run",
            "Connection refused",
        )
        assert "never-shown-secret" not in result.err


# Every command that takes a dump root, window or destination URL with -S options (decode-buffer writes only
# after decoding its buffer): an unreachable endpoint is one error line before anything is read or written.
URL_COMMANDS = [
    ("ls", "{url}"),
    ("verify", "{url}"),
    ("info", "{url}"),
    ("show", "{url}"),
    ("stats", "{url}"),
    ("compare", "{url}", "{url}"),
    ("report", "{url}", "-o", "{tmp}/report.html"),
    ("replay", "{url}", "--stage", "s", "--task", "0"),
    ("plot", "{url}", "--out", "{tmp}/plot.png"),
    ("export-hdf5", "{url}", "{tmp}/window.h5"),
    ("export-tensorboard", "{url}", "{tmp}/tensorboard"),
    ("watch", "{url}", "--once"),
    ("upload", "{tmp}/local", "{url}"),
    ("convert", "{tmp}/legacy", "{url}"),
    ("migrate", "{url}"),
]


@pytest.mark.parametrize("command", URL_COMMANDS, ids=[c[0] for c in URL_COMMANDS])
def test_every_url_command_probes_the_endpoint_first(cli, tmp_path: Path, command: tuple[str, ...]) -> None:
    pytest.importorskip("s3fs")
    with socket.socket() as probe:  # a port nothing listens on: refused at once, no retries
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [part.format(url="s3://bucket/run", tmp=tmp_path) for part in command]
    result = cli(*args, "-S", f"endpoint_url=http://127.0.0.1:{port}")
    assert_input_error(
        result, f"cannot reach the object store endpoint http://127.0.0.1:{port} for s3://bucket/run", "(nothing was"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed")
def test_upload_gs_without_gcsfs(l0: Path, cli) -> None:
    assert_input_error(cli("upload", l0, "gs://bucket/run", "--quiet"), "gcsfs", "not installed")


@pytest.mark.parametrize(
    "device,message",
    [
        ("bogus", "--device 'bogus' is not a torch device"),
        ("meta", "--device meta holds no data"),
        ("cuda", "--device cuda: CUDA is not available here"),
    ],
)
def test_demo_device(cli, tmp_path: Path, device: str, message: str) -> None:
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            pytest.skip("CUDA is available here")
    out = tmp_path / "demo"
    assert_input_error(cli("demo", "--out", out, "--device", device), message)
    assert not out.exists()
