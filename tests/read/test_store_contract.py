"""zarr-python's own store contract (``zarr.testing.store.StoreTests``), its read part, over the project's
read store: :class:`~megadump_zarr.read.integrity.IntegrityStore`.

It wraps the dump's store and is a read face of it, so the contract's write tests are left out
(``test_set`` and the like are ``None`` below, which pytest does not collect) and the data a read test needs
is seeded into the wrapped store: the contract's own ``self.set`` writes there, and so do the
``store.set``/``store._set_many`` calls its listing tests make (through :class:`_Seeded`, which only adds
those two writes to the class under test). What is read back (bytes, byte ranges, sizes, listings,
existence, JSON) is entirely the read store's.

The suite's tests are coroutines and the project runs no asyncio plugin for pytest: :func:`_synced` runs
each one on zarr's own event loop (``zarr.core.sync.sync``, the loop zarr's synchronous API uses).
"""

from __future__ import annotations

from collections.abc import Iterable
import functools
import inspect
import pickle
from typing import Any

import pytest
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import MemoryStore
from zarr.testing.store import StoreTests

from megadump_zarr.read.integrity import IntegrityStore

WRITE_TESTS = (
    "test_set",
    "test_set_not_open",
    "test_set_many",
    "test_delete",
    "test_delete_dir",
    "test_delete_nonexistent_key_does_not_raise",
    "test_clear",
    "test_set_if_not_exists",
    "test_set_sync",
    "test_delete_sync",
    "test_delete_sync_missing",
    "test_serializable_store",
    "test_store_read_only",
    "test_store_open_read_only",
    "test_read_only_store_raises",
    "test_with_read_only_store",
    "test_store_context_manager",
)
"""The contract's tests of writing, deleting and opening a store read-write: not a read store's part."""


def _seeded(cls: type) -> type:
    """``cls`` whose ``set``/``_set_many`` write into the wrapped store (the tests' seeding only)."""

    class _Seeded(cls):  # type: ignore[misc, valid-type]
        async def set(self, key: str, value: Buffer) -> None:
            await self._store.set(key, value)

        async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
            for key, value in values:
                await self._store.set(key, value)

    _Seeded.__name__ = _Seeded.__qualname__ = f"Seeded{cls.__name__}"
    return _Seeded


def _synced(cls: type) -> type:
    """``cls`` with each coroutine test (inherited ones too) run to completion on zarr's event loop."""
    for name in dir(cls):
        test = getattr(cls, name)
        if name.startswith("test_") and inspect.iscoroutinefunction(test):
            setattr(cls, name, _run_sync(test))
    return cls


def _run_sync(test: Any) -> Any:
    @functools.wraps(test)  # keeps the signature (fixtures) and the parametrize marks
    def run(*args: Any, **kwargs: Any) -> Any:
        return sync(test(*args, **kwargs))

    return run


class ReadStoreTests(StoreTests[Any, cpu.Buffer]):
    """The read part of ``StoreTests`` for a read-only wrapper of a ``MemoryStore``."""

    buffer_cls = cpu.Buffer
    read_only: bool

    for _name in WRITE_TESTS:
        locals()[_name] = None
    del _name

    def wrap(self, inner: MemoryStore) -> Any:
        raise NotImplementedError

    async def set(self, store: Any, key: str, value: Buffer) -> None:
        await store._store.set(key, value)

    async def get(self, store: Any, key: str) -> Buffer:
        return await store._store.get(key, prototype=default_buffer_prototype())

    @pytest.fixture
    def store_kwargs(self) -> dict[str, Any]:
        return {"store": MemoryStore()}

    @pytest.fixture
    def store(self, store_kwargs: dict[str, Any]) -> Any:
        store = _seeded(self.store_cls)(**store_kwargs)
        sync(store._store._open())
        return store

    @pytest.fixture
    def store_not_open(self, store_kwargs: dict[str, Any]) -> Any:
        return _seeded(self.store_cls)(**store_kwargs)

    def test_store_repr(self, store: Any) -> None:
        assert repr(store) == f"{self.store_cls.__name__}({store._store!r})"

    def test_store_supports_writes(self, store: Any) -> None:
        assert store.supports_writes is not self.read_only

    def test_store_supports_listing(self, store: Any) -> None:
        assert store.supports_listing

    def test_read_only_as_declared(self, store: Any) -> None:
        assert store.read_only is self.read_only

    async def test_pickles_to_an_equal_reader(self, store: Any) -> None:
        await self.set(store, "c/0", self.buffer_cls.from_bytes(b"\x01\x02"))
        reader = self.store_cls(store._store)  # the class under test itself (the seeding subclass is local)
        copy = pickle.loads(pickle.dumps(reader))
        assert copy == reader and copy.read_only == reader.read_only
        observed = await copy.get("c/0", prototype=default_buffer_prototype())
        assert observed is not None and observed.to_bytes() == b"\x01\x02"


@_synced
class TestIntegrityStore(ReadStoreTests):
    store_cls = IntegrityStore
    read_only = False  # the wrapper passes writes through; the dump reader only ever reads through it
