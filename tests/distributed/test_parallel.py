"""map_ordered: one dask task per item, item order kept, the failing item named, on threads or a real cluster."""

from __future__ import annotations

import dask
import pytest

from megadump_zarr.analyse.parallel import active_client, map_ordered


def _square(x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    return x * x


class _Labelled:
    def __init__(self, value: int) -> None:
        self.value = value
        self.label = f"record {value}"


def _fail(item: _Labelled) -> int:
    raise KeyError("gone")


def _fail_args(item: _Labelled) -> int:
    raise RuntimeError(item.value, "two args")


def test_local_threads_order_progress_and_error() -> None:
    seen: list[tuple[int, int]] = []
    assert active_client() is None
    assert map_ordered(_square, [5, 0, 2, 4], progress=lambda done, total: seen.append((done, total))) == [25, 0, 4, 16]
    assert sorted(seen) == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert map_ordered(_square, []) == []
    with pytest.raises(ValueError, match=r"^item 3 \(3\): three is not allowed$"):
        map_ordered(_square, range(5))
    with pytest.raises(KeyError) as error:
        map_ordered(_fail, [_Labelled(7)])
    assert error.value.args == ("item 0 (record 7): gone",)
    with pytest.raises(RuntimeError) as error:
        map_ordered(_fail_args, [_Labelled(7)])
    assert error.value.args == (7, "two args")
    assert error.value.__notes__ == ["while running _fail_args on item 0 (record 7)"]


def test_honours_dask_config_scheduler() -> None:
    with dask.config.set(scheduler="sync"):
        assert map_ordered(_square, [1, 2]) == [1, 4]


def test_runs_on_the_active_distributed_client(cluster_client) -> None:
    client = cluster_client
    assert active_client() is client
    items = list(range(8))
    items.remove(3)
    seen: list[int] = []
    assert map_ordered(_square, items, progress=lambda done, total: seen.append(done)) == [x * x for x in items]
    assert seen == list(range(1, 8))
    # every task ran in a worker process, not here
    logs = client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert len(logs) == 2 and sum(logs.values()) >= 7
    with pytest.raises(ValueError, match=r"^item 3 \(3\): three is not allowed$"):
        map_ordered(_square, range(5))


def _pid(_: int) -> int:
    import os

    return os.getpid()


def _nested(n: int) -> tuple[bool, int, list[int], list[int]]:
    return active_client() is None, _pid(0), map_ordered(_square, [n, n + 1]), map_ordered(_pid, [0, 1])


def test_nested_calls_inside_a_task_run_in_that_task(cluster_client) -> None:
    results = map_ordered(_nested, [1, 4])
    assert [(r[0], r[2]) for r in results] == [(True, [1, 4]), (True, [16, 25])]
    assert all(r[3] == [r[1], r[1]] for r in results)  # the nested items ran in the task's own process


SECRET = "pArAlLeL/secret+never-in-a-log-0123"


def _open_source(source: object) -> object:
    return source.open()  # type: ignore[attr-defined]


def test_secrets_stay_out_of_keys_reprs_errors_and_worker_logs(cluster_client, tmp_path) -> None:
    from megadump_zarr._parallel import _delayed
    from megadump_zarr.read.source import DumpSource

    source = DumpSource(
        str(tmp_path / "missing"),
        {"key": "AKIAPARALLEL", "secret": SECRET, "client_kwargs": {"aws_session_token": SECRET}},
    )
    assert SECRET not in repr(source) and SECRET not in str(source)
    assert SECRET not in dask.base.tokenize(source) and dask.base.tokenize(source) == dask.base.tokenize(
        DumpSource(source.url, {**source.storage_options, "secret": "another"})
    )  # the secret is not hashed either
    tasks = _delayed(_open_source, [source])
    graph = dict(tasks[0].dask)
    assert SECRET not in repr(graph) and SECRET not in repr(list(graph))
    with pytest.raises(ValueError) as error:
        map_ordered(_open_source, [source])
    assert str(error.value).startswith(f"item 0 ({source.url}): {source.url} is not a megadump_zarr dump root")
    assert SECRET not in str(error.value)
    logs = repr(cluster_client.get_worker_logs()) + repr(cluster_client.get_scheduler_logs())
    assert "Compute Failed" in logs and "megadump-_open_source-" in logs  # the failure was logged, without the secret
    assert SECRET not in logs and "AKIAPARALLEL" not in logs
