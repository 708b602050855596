"""Pack format 4: a pack's per-row metadata as one array along ``task``, not JSON lists in three documents.

Format 3 kept each row's task attributes (``attributes.tasks`` of the task id array) and record attributes
(``attributes.records`` of each record array, ``stats`` included) as JSON lists. Every array document is also
copied into the pack group's and the window's consolidated metadata, so those 550 bytes a record were stored
three times: 1,650 of the 1,654 document bytes of a packed record (P2, 8 KiB records).

Format 4 splits each list into what every row shares and what varies (:func:`encode_rows`):

* ``pack/row_fields`` — float64 ``(T, C)``, dims ``("task", "field")``, one chunk, codecs ``bytes`` +
  ``crc32c``: one column per varying number (``taskId``, ``stageTaskIndex``, ``sourceOffsetBytes``, each
  statistic, each row coordinate's bounds, ...). Its attributes:

  - ``megadumpRowFields``: ``{"tasks": spec, "records": {record: spec, ...}}``, where a spec is
    ``{"template": row, "columns": [...]}``: the JSON object every row shares (a varying leaf is ``null``
    there), and per varying leaf ``{"path": [...], "column": c, "kind": "int"|"float"}`` (``"nullable":
    true`` when ``null`` is stored as NaN) or ``{"path": [...], "values": [...]}`` (a leaf that is not one kind
    of number: kept as JSON, one value per row);
  - ``fields``: each column's dotted name (``tasks.attrs.stageTaskIndex``, ``input_00_x.stats.min``), for a
    person reading the array with plain xarray;
  - ``tableCrc32c``: the crc32c the chunk stores (8 hex digits), binding the chunk to this pack: a chunk of
    the same shape copied from another pack fails it.

  A number goes into a column only when float64 holds it exactly (an int of at most 2**53, any float); the
  decoded rows equal the rows the writer had, value for value and key order included (a test holds it
  over hypothesis-drawn rows).
* the task id array and the record arrays carry no per-row lists; readers rebuild them
  (:func:`hydrate_pack`) and read the pack as format 3 from there.

So the rows' metadata costs its numbers once (about 80 bytes a record) and its shared part three times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import json
import math
import re
import struct
from typing import Any

import google_crc32c
import numpy as np

__all__ = [
    "FIELDS_ARRAY",
    "FIELDS_ATTR",
    "FIELDS_DIM",
    "FieldsChunkError",
    "column_names",
    "decode_rows",
    "decode_table",
    "encode_rows",
    "encode_table",
    "fields_attributes",
    "fields_chunk_key",
    "hydrate_pack",
    "is_fields_pack",
]

FIELDS_ARRAY = "row_fields"
"""A format-4 pack's per-row metadata array (a record name never takes it: records are ``{io}_{nn}_{name}``)."""
FIELDS_ATTR = "megadumpRowFields"
"""The ``row_fields`` attribute holding the specs of ``tasks`` and of each record array."""
FIELDS_DIM = "field"
CRC_ATTR = "tableCrc32c"
_EXACT_INT = 2**53
_TABLE_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
_CRC = struct.Struct("<I")


def fields_chunk_key(pack: str) -> str:
    """The key of a pack's ``row_fields`` chunk (relative to what ``pack`` is relative to)."""
    return f"{pack}/{FIELDS_ARRAY}/c.0.0"


def is_fields_pack(pack: str, nodes: Mapping[str, Any]) -> bool:
    """Whether a pack among ``nodes`` keeps its per-row metadata in ``row_fields`` (format 4)."""
    doc = nodes.get(f"{pack}/{FIELDS_ARRAY}")
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    return isinstance(attrs, dict) and FIELDS_ATTR in attrs


def _same_scalar(values: Sequence[Any]) -> bool:
    """Every value is the first, of its type (``1``, ``1.0`` and ``True`` differ; a NaN is never the same)."""
    first = values[0]
    kind = type(first)
    return kind not in (dict, list) and all(type(v) is kind and v == first for v in values)


def _numeric(values: Sequence[Any]) -> tuple[str, bool] | None:
    """``(kind, nullable)`` when float64 holds every value exactly (``None`` as NaN), else ``None``."""
    kinds = {type(v) for v in values if v is not None}
    nullable = len(kinds) != 0 and any(v is None for v in values)
    if kinds == {int}:
        if all(-_EXACT_INT <= v <= _EXACT_INT for v in values if v is not None):
            return "int", nullable
        return None
    if kinds == {float}:
        if nullable and any(v != v for v in values if v is not None):
            return None  # a NaN would read back as null
        return "float", nullable
    return None


_NUMBERED = re.compile(r"^(\D*)(\d+)(.*)$", re.S)


def _numbered(values: Sequence[Any]) -> tuple[list[float], tuple[str, int, str]] | None:
    """Strings that are one number in a shared frame (``task_000007``: ``"task_"``, 6 digits, ``""``), as the
    numbers and the frame, when each reads back exactly; else ``None``."""
    if not all(type(v) is str for v in values):
        return None
    match = _NUMBERED.match(values[0])
    if match is None:
        return None
    prefix, digits, suffix = match.groups()
    width = len(digits)
    numbers: list[float] = []
    for value in values:
        match = _NUMBERED.match(value)
        if match is None or match.group(1) != prefix or match.group(3) != suffix:
            return None
        number = int(match.group(2))
        if number > _EXACT_INT or f"{prefix}{number:0{width}d}{suffix}" != value:
            return None
        numbers.append(float(number))
    return numbers, (prefix, width, suffix)


def encode_rows(rows: Sequence[Any], columns: list[list[Any]]) -> dict[str, Any]:
    """The spec of ``rows`` (JSON values, one per row); each varying number's column is appended to ``columns``.

    Args:
        rows: At least one row, as ``json.loads`` gives it.
        columns: The table being built, one list of floats per column; the spec names positions in it.
    """
    specs: list[dict[str, Any]] = []
    template = json.loads(json.dumps(rows[0]))

    def walk(values: Sequence[Any], path: list[Any], holder: Any, key: Any) -> None:
        # containers of one shape are walked into (a shared one ends as shared leaves); scalars compared by type
        first = values[0]
        if type(first) is dict:
            keys = tuple(first)
            if all(type(v) is dict and tuple(v) == keys for v in values):
                for name in keys:
                    walk([v[name] for v in values], [*path, name], holder[key], name)
                return
        elif type(first) is list:
            if all(type(v) is list and len(v) == len(first) for v in values):
                for index in range(len(first)):
                    walk([v[index] for v in values], [*path, index], holder[key], index)
                return
        elif _same_scalar(values):
            return
        holder[key] = None
        numeric = _numeric(values)
        numbered = _numbered(values) if numeric is None else None
        if numbered is not None:
            numbers, (prefix, width, suffix) = numbered
            specs.append({"path": path, "column": len(columns), "kind": "int", "format": [prefix, width, suffix]})
            columns.append(numbers)
            return
        if numeric is None:
            specs.append({"path": path, "values": list(values)})
            return
        kind, nullable = numeric
        spec: dict[str, Any] = {"path": path, "column": len(columns), "kind": kind}
        if nullable:
            spec["nullable"] = True
        specs.append(spec)
        columns.append([math.nan if v is None else float(v) for v in values])

    box = [template]
    walk(list(rows), [], box, 0)
    return {"template": box[0], "columns": specs}


def _column_values(spec: Mapping[str, Any], table: np.ndarray, count: int, where: str) -> list[Any]:
    """One column's values, as JSON gives them."""
    if "values" in spec:
        values = spec["values"]
        if not isinstance(values, list) or len(values) != count:
            raise ValueError(f"{where}: values must be a list of {count} entries")
        return values
    column, kind = spec.get("column"), spec.get("kind")
    if type(column) is not int or not 0 <= column < table.shape[1]:
        raise ValueError(f"{where}: column {column!r} is not one of the table's {table.shape[1]} columns")
    if kind not in ("int", "float"):
        raise ValueError(f"{where}: kind {kind!r} is not 'int' or 'float'")
    nullable = spec.get("nullable", False) is True
    data = table[:, column]
    missing = np.isnan(data)
    if missing.any() and not nullable and kind == "int":
        raise ValueError(f"{where}: an 'int' column without 'nullable' holds NaN")
    present = data[~missing]
    if kind == "int" and (not bool(np.all(np.isfinite(present))) or bool(np.any(present != np.trunc(present)))):
        raise ValueError(f"{where}: an 'int' column holds a value that is not an integer")
    values: list[Any] = [int(v) for v in data.tolist()] if kind == "int" and not missing.any() else data.tolist()
    if missing.any() and nullable:
        values = [None if m else (int(v) if kind == "int" else v) for v, m in zip(values, missing.tolist())]
    frame = spec.get("format")
    if frame is not None:
        if (
            kind != "int"
            or missing.any()
            or not isinstance(frame, list)
            or len(frame) != 3
            or type(frame[0]) is not str
            or type(frame[1]) is not int
            or not 0 < frame[1] <= 32
            or type(frame[2]) is not str
        ):
            raise ValueError(f"{where}: format {frame!r} is not [prefix, width, suffix] of an 'int' column")
        prefix, width, suffix = frame
        values = [f"{prefix}{v:0{width}d}{suffix}" for v in values]
    return values


def _place(template: Any, path: list[Any]) -> Any:
    """The container holding ``path``'s last step in ``template`` (``None``: no such place)."""
    holder = template
    for position, step in enumerate(path):
        if type(step) is int:
            if type(holder) is not list or not 0 <= step < len(holder):
                return None
        elif type(holder) is not dict or step not in holder:
            return None
        if position == len(path) - 1:
            return holder
        holder = holder[step]
    return None


def decode_rows(spec: Any, table: np.ndarray, count: int, where: str) -> list[Any]:
    """The rows :func:`encode_rows` encoded, from their spec and the table.

    Args:
        spec: ``{"template": ..., "columns": [...]}``.
        table: The float64 ``(T, C)`` table.
        count: Rows (``T``).
        where: The spec's place, for messages (``.../row_fields/zarr.json: attributes.megadumpRowFields.tasks``).

    Raises:
        ValueError: A malformed spec (naming the field) or a column path the template does not hold.
    """
    if not isinstance(spec, dict) or "template" not in spec or not isinstance(spec.get("columns"), list):
        raise ValueError(f"{where} must be an object with 'template' and a 'columns' list")
    columns: list[tuple[list[Any], list[Any]]] = []
    for position, column in enumerate(spec["columns"]):
        at = f"{where}.columns[{position}]"
        if not isinstance(column, dict):
            raise ValueError(f"{at} is not an object")
        path = column.get("path")
        if not isinstance(path, list) or not all(type(p) in (str, int) for p in path):
            raise ValueError(f"{at}.path {path!r} is not a list of keys and indices")
        values = _column_values(column, table, count, at)
        if path and _place(spec["template"], path) is None:
            raise ValueError(f"{at}.path {path!r} is not a place in the template")
        columns.append((path, values))
    rows = _rows_by_text(spec["template"], columns, count)
    return rows if rows is not None else _rows_by_setting(spec["template"], columns, count, where)


def _rows_by_setting(template: Any, columns: list[tuple[list[Any], list[Any]]], count: int, where: str) -> list[Any]:
    """Each row a copy of the template, then each column's value set at its path, in column order."""
    try:
        text = json.dumps(template)
        rows = json.loads("[" + ",".join([text] * count) + "]") if count else []
    except (RecursionError, ValueError, TypeError) as error:
        raise ValueError(f"{where}.template cannot be copied: {type(error).__name__}") from None
    for position, (path, values) in enumerate(columns):
        if not path:
            rows = list(values)
            continue
        *parents, last = path
        try:
            for row, value in zip(rows, values):
                holder = row
                for step in parents:
                    holder = holder[step]
                holder[last] = value
        except (KeyError, IndexError, TypeError):  # below a leaf an earlier column set
            raise ValueError(
                f"{where}.columns[{position}].path {path!r} lies below a value another column sets"
            ) from None
    return rows


_MARK = "\x01megadump-column-{}\x02"


def _rows_by_text(template: Any, columns: list[tuple[list[Any], list[Any]]], count: int) -> list[Any] | None:
    """:func:`_rows_by_setting`'s rows, built as one JSON text and parsed once (the P5 window's 4096 rows: hydration
    89 -> about 50 ms under the profiler, with the JSON-text columns of :func:`_json_texts`); ``None``
    where it cannot be sure to give the same rows (a whole-row column, paths that nest, a template that holds a
    mark), which the slow path then builds or names."""
    paths = [tuple(path) for path, _ in columns]
    if not count or not paths or not all(paths) or len(set(paths)) != len(paths):
        return None
    ordered = sorted(paths, key=len)
    if any(longer[: len(shorter)] == shorter for i, shorter in enumerate(ordered) for longer in ordered[i + 1 :]):
        return None
    try:
        marked = json.loads(json.dumps(template))
        for index, (path, _) in enumerate(columns):
            holder = marked
            for step in path[:-1]:
                holder = holder[step]
            holder[path[-1]] = _MARK.format(index)
        text = json.dumps(marked).replace("%", "%%")
    except (RecursionError, ValueError, TypeError, KeyError, IndexError):
        return None
    found = re.findall(r'"\\u0001megadump-column-(\d+)\\u0002"', text)
    if sorted(found) != sorted(str(i) for i in range(len(columns))):
        return None  # a template string that holds a mark
    fmt = re.sub(r'"\\u0001megadump-column-\d+\\u0002"', "%s", text)
    texts = [_json_texts(columns[int(i)][1]) for i in found]
    return json.loads("[" + ",".join(fmt % values for values in zip(*texts)) + "]")


_PLAIN = re.compile(r"^[ !#-\[\]-~]*$")
"""Printable ASCII without a quote or a backslash: JSON text is the string between quotes."""


def _json_texts(values: list[Any]) -> list[str]:
    """Each value as JSON text, as :func:`json.dumps` writes it (floats: ``repr``, ``NaN``, ``Infinity``)."""
    kinds = {type(v) for v in values}
    if kinds <= {int, type(None)}:
        return ["null" if v is None else int.__repr__(v) for v in values]
    if kinds <= {float, type(None)}:
        return ["null" if v is None else float.__repr__(v) if math.isfinite(v) else json.dumps(v) for v in values]
    if kinds == {str} and all(_PLAIN.match(v) for v in values):
        return [f'"{v}"' for v in values]
    return [json.dumps(v) for v in values]


def encode_table(columns: list[list[float]], count: int) -> bytes:
    """The ``row_fields`` chunk: float64 ``(count, len(columns))`` little-endian, C order, then its crc32c."""
    table = np.array(columns, dtype="<f8").reshape(len(columns), count).T if columns else np.zeros((count, 0), "<f8")
    data = np.ascontiguousarray(table).tobytes()
    return data + _CRC.pack(google_crc32c.value(data))


class FieldsChunkError(ValueError):
    """A ``row_fields`` chunk that is absent, damaged or another pack's (the message names its key)."""


def decode_table(raw: bytes | None, count: int, width: int, key: str, crc: Any) -> np.ndarray:
    """The float64 ``(count, width)`` table from a stored ``row_fields`` chunk.

    Args:
        raw: The chunk's bytes (``None``: absent).
        count: Rows.
        width: Columns.
        key: The chunk's key, for messages.
        crc: The ``tableCrc32c`` the document records (8 hex digits).

    Raises:
        FieldsChunkError: Absent, the wrong size, failing its crc32c, or another pack's chunk (naming ``key``).
    """
    if count == 0 or width == 0:
        return np.zeros((count, width), dtype=np.float64)
    if raw is None:
        raise FieldsChunkError(f"{key}: the pack's row_fields chunk is missing")
    expected = 8 * count * width + 4
    if len(raw) != expected:
        raise FieldsChunkError(f"{key}: the row_fields chunk is {len(raw)} bytes, expected {expected}")
    body, (stored,) = raw[:-4], _CRC.unpack(raw[-4:])
    actual = google_crc32c.value(body)
    if actual != stored:
        raise FieldsChunkError(f"{key}: checksum mismatch (stored {stored:#010x}, computed {actual:#010x})")
    if crc != f"{stored:08x}":
        raise FieldsChunkError(
            f"{key}: its crc32c {stored:08x} is not the {CRC_ATTR} {crc!r} of its document "
            "(a chunk written for another pack)"
        )
    return np.frombuffer(body, dtype="<f8").reshape(count, width)


def fields_attributes(specs: Mapping[str, Any], names: list[str], chunk: bytes) -> dict[str, Any]:
    """The ``row_fields`` array's attributes."""
    return {
        FIELDS_ATTR: dict(specs),
        "fields": names,
        CRC_ATTR: f"{_CRC.unpack(chunk[-4:])[0]:08x}",
        "long_name": "each row's varying task and record attributes (see attributes.fields)",
    }


def column_names(specs: Mapping[str, Any]) -> list[str]:
    """Each column's dotted name, in column order (``tasks.attrs.stageTaskIndex``, ``input_00_x.stats.min``)."""
    named: dict[int, str] = {}
    for owner, spec in [("tasks", specs["tasks"]), *specs["records"].items()]:
        for column in spec["columns"]:
            if "column" in column:
                named[column["column"]] = ".".join([owner, *map(str, column["path"])])
    return [named[i] for i in sorted(named)]


def hydrate_pack(
    pack: str,
    nodes: Mapping[str, dict[str, Any]],
    raw: bytes | None,
    task_name: str,
    label: str,
    tasks_attr: str = "tasks",
    records_attr: str = "records",
) -> dict[str, dict[str, Any]]:
    """A format-4 pack's nodes as format 3 stores them: the task id array with ``attributes.tasks`` and each
    record array with ``attributes.records``, rebuilt from ``row_fields`` (the other nodes as they are).

    Args:
        pack: The pack's path relative to the window.
        nodes: The pack's nodes (path relative to the window -> document), ``row_fields`` among them.
        raw: The stored ``row_fields`` chunk (:func:`fields_chunk_key`; ``None``: absent).
        task_name: The task id array's component.
        label: The pack as messages name it (window key included).
        tasks_attr: Format 3's attribute of the task id array (``tasks``).
        records_attr: Format 3's attribute of a record array (``records``).

    Raises:
        FieldsChunkError: The chunk is absent, damaged or another pack's (naming its key).
        ValueError: A malformed ``row_fields`` document (naming it and the field).
    """
    doc = nodes[f"{pack}/{FIELDS_ARRAY}"]
    where = f"{label}/{FIELDS_ARRAY}/zarr.json"
    shape = doc.get("shape")
    if not isinstance(shape, list) or len(shape) != 2 or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{where}: shape {shape!r} is not [tasks, fields]")
    if doc.get("data_type") != "float64":
        raise ValueError(f"{where}: data_type {doc.get('data_type')!r} is not 'float64'")
    if doc.get("codecs") != _TABLE_CODECS:
        raise ValueError(f"{where}: codecs {doc.get('codecs')!r} are not {_TABLE_CODECS!r} (one raw chunk)")
    count, width = shape
    if count > 1 and not width:  # rows differ (their task ids): without a column, nothing bounds the row count
        raise ValueError(f"{where}: shape {shape!r} holds no column for its {count} rows")
    task_shape = (nodes.get(f"{pack}/{task_name}") or {}).get("shape")
    if isinstance(task_shape, list) and task_shape != [count]:
        raise ValueError(f"{where}: shape {shape!r} does not hold the rows of {task_name} (shape {task_shape!r})")
    attrs = doc["attributes"]
    specs = attrs[FIELDS_ATTR]
    if not isinstance(specs, dict) or not isinstance(specs.get("records"), dict) or "tasks" not in specs:
        raise ValueError(f"{where}: attributes.{FIELDS_ATTR} must hold 'tasks' and a 'records' object")
    table = decode_table(raw, count, width, f"{label}/{FIELDS_ARRAY}/c.0.0", attrs.get(CRC_ATTR))
    out = dict(nodes)
    task_key = f"{pack}/{task_name}"
    if task_key in out:
        tasks = decode_rows(specs["tasks"], table, count, f"{where}: attributes.{FIELDS_ATTR}.tasks")
        task_doc = dict(out[task_key])
        task_doc["attributes"] = {**(task_doc.get("attributes") or {}), tasks_attr: tasks}
        out[task_key] = task_doc
    for record, spec in specs["records"].items():
        key = f"{pack}/{record}"
        if key not in out:
            continue  # a torn window's record array not written yet
        rows = decode_rows(spec, table, count, f"{where}: attributes.{FIELDS_ATTR}.records.{record}")
        record_doc = dict(out[key])
        record_doc["attributes"] = {**(record_doc.get("attributes") or {}), records_attr: rows}
        out[key] = record_doc
    return out
