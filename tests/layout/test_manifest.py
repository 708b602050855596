"""The window manifest (layout.manifest.WindowManifest): one typed object every window writer builds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from megadump_zarr._version import __version__
from megadump_zarr.layout.manifest import WindowManifest
from megadump_zarr.layout.schema import PACK_STORAGE, FORMAT_VERSION, STORAGE_KINDS


def _l1(**changes):
    fields = dict(
        level="L1",
        rank=2,
        window_index=5,
        capture_phase="task_boundary",
        storage=PACK_STORAGE,
        invocations=("invocation_000000_forward", "invocation_000001_backward"),
        partial_launches=("invocation_000001_backward",),
    )
    return WindowManifest(**{**fields, **changes})


def test_to_attrs_is_the_dumpers_window_document_key_for_key_in_order() -> None:
    assert list(_l1().to_attrs().items()) == [
        ("schemaVersion", FORMAT_VERSION),
        ("producer", f"megadump_zarr {__version__}"),
        ("level", "L1"),
        ("tensorSerialization", "zarr-v3"),
        ("windowIndex", 5),
        ("capturePhaseSemantics", "task_boundary"),
        ("stageViewStorage", "task_record_packs"),
        ("rank", 2),
        ("invocationCount", 2),
        ("invocations", ["invocation_000000_forward", "invocation_000001_backward"]),
        ("partialLaunches", ["invocation_000001_backward"]),
    ]


def test_optional_keys_appear_only_when_given_and_step_sits_after_rank() -> None:
    attrs = _l1(level="L0", storage="array_per_tensor", partial_launches=None, step=9, converted_from={"a": 1})
    assert list(attrs.to_attrs())[7:] == ["rank", "step", "invocationCount", "invocations", "convertedFrom"]
    assert "partialLaunches" not in attrs.to_attrs()


def test_from_attrs_round_trips_and_keeps_what_the_store_added() -> None:
    attrs = {**_l1().to_attrs(), "status": "complete", "createdAt": "2026-12-02T00:00:00Z"}
    manifest = WindowManifest.from_attrs(json.loads(json.dumps(attrs)))
    assert manifest == _l1(extra={"status": "complete", "createdAt": "2026-12-02T00:00:00Z"})
    assert manifest.to_attrs() == attrs


def test_numpy_integers_are_stored_as_plain_ints() -> None:
    manifest = _l1(rank=np.int64(2), window_index=np.int32(5))
    assert type(manifest.rank) is int and type(manifest.window_index) is int
    json.dumps(manifest.to_attrs())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"level": "L2"}, "WindowManifest.level must be one of ('L0', 'L1'), got 'L2'"),
        ({"rank": -1}, "WindowManifest.rank must be an integer >= 0, got -1"),
        ({"window_index": True}, "WindowManifest.window_index must be an integer >= 0, got True"),
        ({"storage": "files"}, "WindowManifest.storage must be one of"),
        ({"capture_phase": 5}, "WindowManifest.capture_phase must be non-empty text, got 5"),
        ({"invocations": ["invocation_000000_forward"]}, "WindowManifest.invocations must be a tuple"),
        ({"invocations": ("x",)}, "WindowManifest.invocations must be a tuple of invocation group names"),
        ({"step": 1.5}, "WindowManifest.step must be an integer or None, got 1.5"),
        ({"extra": {"rank": 3}}, "WindowManifest.extra must be a mapping of other attributes"),
    ],
)
def test_bad_fields_are_refused_by_name(changes, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _l1(**changes)


def test_from_attrs_names_the_window_and_the_mismatch() -> None:
    attrs = _l1().to_attrs()
    with pytest.raises(ValueError, match=r"rank_2/window_0005: invocationCount 3 but 2 invocations listed"):
        WindowManifest.from_attrs({**attrs, "invocationCount": 3}, "rank_2/window_0005")
    with pytest.raises(ValueError, match=r"w: window attributes lack \['rank'\]"):
        WindowManifest.from_attrs({k: v for k, v in attrs.items() if k != "rank"}, "w")
    with pytest.raises(ValueError, match=r"w: WindowManifest.storage must be one of"):
        WindowManifest.from_attrs({**attrs, "stageViewStorage": "?"}, "w")


def test_every_storage_kind_is_one_a_writer_stamps() -> None:
    assert STORAGE_KINDS == {
        "task_record_packs",
        "array_per_task_record",
        "array_per_tensor_with_ports",
        "array_per_tensor",
    }
