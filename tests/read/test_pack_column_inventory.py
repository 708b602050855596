"""A pack's arrays along ``task`` (read below the integrity store, for ``records()``) are held to the window
inventory: each column's document and chunk must be the ones it lists, and the inventory is read in the same
concurrent batch as the columns (a packed window's scan stays one batch of gets)."""

from __future__ import annotations

from pathlib import Path
import shutil

import pytest

from megadump_zarr import open_dump
from megadump_zarr.layout.inventory import INVENTORY_FILE
from megadump_zarr.read import catalog
from megadump_zarr.read.errors import DumpIntegrityError
from tests._layout import record_in_inventory
from tests._packs import edit_document

FIXTURE = Path(__file__).parent / "data" / "format10" / "packs"
WINDOW = "rank_0/window_0000"
PACK = "invocation_000000_forward/stages/combine/pack_0000"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "packed"))


def test_a_column_chunk_the_inventory_does_not_list_is_refused(root: Path) -> None:
    """The inventory lists ``core_id``'s chunk for ``owner_id`` (rewritten with its own digest in the window
    document): the chunk stored there is not the one listed."""
    other = (root / WINDOW / PACK / "core_id" / "c.0").read_bytes()
    assert other != (root / WINDOW / PACK / "owner_id" / "c.0").read_bytes()
    record_in_inventory(root, f"{WINDOW}/{PACK}/owner_id/c.0", other)
    with pytest.raises(DumpIntegrityError, match="is not the chunk the window inventory lists") as info:
        open_dump(root).records()
    assert info.value.key == f"{WINDOW}/{PACK}/owner_id/c"


def test_a_column_document_edited_in_every_copy_is_refused(root: Path) -> None:
    edit_document(root / WINDOW, PACK, "owner_id", lambda doc: doc["attributes"].__setitem__("note", "edited"))
    with pytest.raises(DumpIntegrityError, match="the document was edited") as info:
        open_dump(root).records()
    assert info.value.key == f"{WINDOW}/{PACK}/owner_id/zarr.json"


def test_a_packed_window_without_its_inventory_is_refused(root: Path) -> None:
    (root / WINDOW / INVENTORY_FILE).unlink()
    with pytest.raises(DumpIntegrityError, match="the window inventory .* is missing") as info:
        open_dump(root).records()
    assert info.value.key == f"{WINDOW}/{INVENTORY_FILE}"


def test_the_inventory_is_read_in_the_columns_batch(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batches: list[list[str]] = []
    get_many = catalog.get_many

    def logged(store, keys):
        batches.append(list(keys))
        return get_many(store, keys)

    monkeypatch.setattr(catalog, "get_many", logged)
    open_dump(root).records()
    inventory = f"{WINDOW}/{INVENTORY_FILE}"
    with_inventory = [batch for batch in batches if inventory in batch]
    assert len(with_inventory) == 1, batches
    columns = [key for key in with_inventory[0] if key.startswith(f"{WINDOW}/{PACK}/")]
    assert f"{WINDOW}/{PACK}/task_id/c.0" in columns and len(columns) >= 5, with_inventory
    assert not any(
        key.startswith(f"{WINDOW}/{PACK}/") for batch in batches if batch is not with_inventory[0] for key in batch
    )
