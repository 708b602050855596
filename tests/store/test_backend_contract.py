"""One contract, :class:`BackendTests`, run over the three write backends (the way zarr's ``StoreTests`` keeps
its stores honest): ``LocalBackend`` (a directory), ``FsspecBackend`` (fsspec's ``memory://``) and
``ObjectStoreBackend`` on a real S3 protocol server (moto's ThreadedMotoServer, ``tests/_moto.py``).

What the writer relies on: a put replaces, ``put_many`` stores every pair, ``get`` of a missing key is
``None``, buffers other than ``bytes`` are stored byte for byte, ``delete_prefix`` removes the key and all
below it (never a sibling sharing the name's prefix) and tolerates a missing one, ``claim`` is exclusive,
``put_durable`` stores, ``location`` names the key under the root.
"""

from __future__ import annotations

from collections.abc import Iterator
import uuid

import numpy as np
import pytest

from megadump_zarr.store.backend import Backend, FsspecBackend, LocalBackend
from tests._moto import KEY, SECRET, moto_s3


class BackendTests:
    """The contract every write backend keeps; a subclass provides the ``backend`` fixture."""

    def test_put_then_get_and_replace(self, backend: Backend) -> None:
        assert backend.get("rank_0/window_0000/zarr.json") is None
        backend.put("rank_0/window_0000/zarr.json", b'{"a": 1}')
        assert backend.get("rank_0/window_0000/zarr.json") == b'{"a": 1}'
        backend.put("rank_0/window_0000/zarr.json", b"{}", atomic=True)
        assert backend.get("rank_0/window_0000/zarr.json") == b"{}"
        assert backend.exists("rank_0/window_0000/zarr.json") and not backend.exists("rank_0/window_0000/nope")

    def test_an_empty_object(self, backend: Backend) -> None:
        backend.put("w/empty", b"")
        assert backend.get("w/empty") == b"" and backend.exists("w/empty")

    def test_buffers_are_stored_byte_for_byte(self, backend: Backend) -> None:
        values = np.arange(-3, 5, dtype="<i4")
        backend.put("w/array", memoryview(values))
        backend.put("w/bytearray", bytearray(b"\x00\xff\x10"))
        assert backend.get("w/array") == values.tobytes() and backend.get("w/bytearray") == b"\x00\xff\x10"

    def test_put_many_stores_every_pair(self, backend: Backend) -> None:
        items = [(f"w/c/{i}", bytes([i]) * (i + 1)) for i in range(7)]
        backend.put_many(items)
        backend.put_many([])
        assert [backend.get(key) for key, _ in items] == [data for _, data in items]

    def test_delete_prefix_removes_the_key_and_below_only(self, backend: Backend) -> None:
        backend.put_many(
            [
                ("r/window_0001/zarr.json", b"1"),
                ("r/window_0001/a/c/0", b"2"),
                ("r/window_00010/zarr.json", b"3"),
                ("r/window_0002/zarr.json", b"4"),
            ]
        )
        backend.delete_prefix("r/window_0001")
        assert backend.get("r/window_0001/zarr.json") is None and backend.get("r/window_0001/a/c/0") is None
        assert backend.get("r/window_00010/zarr.json") == b"3" and backend.get("r/window_0002/zarr.json") == b"4"
        backend.delete_prefix("r/window_9999")  # missing: fine
        backend.put("single", b"x")
        backend.delete_prefix("single")
        assert backend.get("single") is None

    def test_claim_is_exclusive(self, backend: Backend) -> None:
        backend.claim("rank_0/window_0003")
        backend.put("rank_0/window_0003/zarr.json", b'{"attributes": {"status": "writing"}}')
        with pytest.raises(FileExistsError, match="window_0003"):
            backend.claim("rank_0/window_0003")
        backend.claim("rank_0/window_0004")  # another window is free

    def test_put_durable_and_barrier(self, backend: Backend) -> None:
        backend.put("w/a/c/0", b"chunk")
        backend.barrier("w")
        backend.put_durable("w/zarr.json", b'{"status": "complete"}')
        assert backend.get("w/zarr.json") == b'{"status": "complete"}' and backend.get("w/a/c/0") == b"chunk"

    def test_location_names_the_key_under_the_root(self, backend: Backend) -> None:
        where = backend.location("rank_0/window_0000/zarr.json")
        assert where.endswith("rank_0/window_0000/zarr.json") and where.startswith(backend.url.rstrip("/"))


class TestLocalBackend(BackendTests):
    @pytest.fixture
    def backend(self, tmp_path) -> Backend:
        return LocalBackend(str(tmp_path / "root"))

    def test_files_land_in_the_directory(self, tmp_path) -> None:
        LocalBackend(str(tmp_path / "root")).put("a/b", b"xyz")
        assert (tmp_path / "root" / "a" / "b").read_bytes() == b"xyz"


class TestFsspecBackend(BackendTests):
    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        url = f"memory://megadump-contract-{uuid.uuid4().hex}"
        backend = FsspecBackend(url)
        yield backend
        backend.delete_prefix("")  # the whole root (memory:// lives as long as the process)


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    pytest.importorskip("s3fs")
    with moto_s3("contract") as endpoint:
        yield endpoint


class TestObjectStoreBackend(BackendTests):
    @pytest.fixture(params=["obstore", "fsspec"])
    def backend(self, request, moto_endpoint: str) -> Iterator[Backend]:
        from megadump_zarr.store.object_backend import ObjectStoreBackend

        if request.param == "obstore":
            pytest.importorskip("obstore")
        options = {"key": KEY, "secret": SECRET, "endpoint_url": moto_endpoint}
        backend = ObjectStoreBackend(f"s3://contract/{uuid.uuid4().hex}", options, client=request.param)
        assert backend.client_name == request.param
        yield backend
        backend.close()
