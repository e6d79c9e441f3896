"""JSON objects <-> frozen dataclasses, validated field by field where they are read.

A field typed `float` takes any JSON number (never a bool), `int` an integer, `str`,
`bool`, `dict` and `list` their JSON kinds (`list[X]` and `dict[str, X]` each item as X);
`X | None` also takes null; a dataclass field takes a nested object. Missing required
fields, unknown fields and wrong kinds raise `RunDataError` naming the file and the field's
dotted path.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache
from typing import Any, TypeVar

from advisor.rundata.files import RunDataError

MAX_INT = 1 << 63  # past any count or size a run records
OPEN = "open"  # a field's metadata key: it holds an open object's other keys
_KINDS = {float: (int, float), int: (int,), str: (str,), bool: (bool,), dict: (dict,),
          list: (list,), tuple: (list, tuple)}


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check(value: Any, hint: Any, file: str, path: str) -> Any:
    if hint is typing.Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        for kind in kinds[:-1]:  # the first alternative that fits; the last one names the error
            try:
                return _check(value, kind, file, path)
            except RunDataError:
                pass
        return _check(value, kinds[-1], file, path)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        read = getattr(hint, "from_run_file", None)  # a type that reads older forms too
        if read is not None:
            return read(value, f"{file}: {path}")
        return from_json(hint, value, file, path)
    kind = origin or hint
    ok = _KINDS.get(kind, (object,))
    if not isinstance(value, ok) or (isinstance(value, bool) and bool not in ok):
        raise RunDataError(f"{file}: {path} must be {_NAMES.get(kind, kind.__name__)}, "
                           f"not {value!r}")
    args = typing.get_args(hint)
    if kind is tuple and isinstance(value, list | tuple):  # tuple[X, ...]: each item as X
        return tuple(_check(v, args[0], file, f"{path}[{i}]") for i, v in enumerate(value))
    if isinstance(value, list) and args:
        return [_check(v, args[0], file, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise RunDataError(f"{file}: {path} must be a finite number, not {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise RunDataError(f"{file}: {path} must be an integer of at most 2^63, not "
                           f"{str(value)[:20]}...")
    if isinstance(value, dict) and len(args) == 2:
        return {k: _check(v, args[1], file, _join(path, k)) for k, v in value.items()}
    return value


_NAMES = {float: "a number", int: "an integer", str: "a string", bool: "true or false",
          dict: "an object", list: "a list", tuple: "a list"}


_T = TypeVar("_T")


def from_json(cls: type[_T], data: Any, file: str, path: str = "") -> _T:
    """An instance of dataclass `cls` from a parsed JSON object, read from `file`; `path` is
    the object's dotted place in it ("" for the whole file)."""
    if not isinstance(data, dict):
        raise RunDataError(f"{file}: {path or 'the file'} must be a JSON object, "
                           f"not {type(data).__name__}")
    record: Any = cls  # a dataclass, as every caller's is
    hints, fields = _hints(record), {f.name: f for f in dataclasses.fields(record)}
    rest = next((f.name for f in fields.values() if f.metadata.get(OPEN)), None)
    unknown = sorted(set(data) - set(fields) - ({rest} if rest else set()))
    values: dict[str, Any] = {}
    if rest is not None:  # an open object keeps the keys no field names, as they are
        values[rest] = {k: data[k] for k in unknown}
    elif unknown:
        raise RunDataError(f"{file}: unknown field {_join(path, unknown[0])!r}")
    for name, f in fields.items():
        if name == rest:
            continue
        if name in data:
            values[name] = _check(data[name], hints[name], file, _join(path, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RunDataError(f"{file}: missing field {_join(path, name)!r}")
    try:
        return cls(**values)
    except ValueError as e:  # its own checks of ranges (advisor.rundata.bounds)
        raise RunDataError(f"{file}: {path or 'the file'}: {e}") from None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def open_keys() -> Any:
    """The field of a dataclass read from an open JSON object: the keys no other field
    names, kept as they are and written back beside the others (whose None values an open
    object leaves out, as they were absent)."""
    return dataclasses.field(default_factory=dict, metadata={OPEN: True})


def to_json_value(value: Any) -> Any:
    """`value` (dataclasses, tuples and all) as JSON would give it back."""
    return _plain(value)


def to_json(obj: Any) -> dict[str, Any]:
    """A dataclass instance as a JSON-ready dict (nested dataclasses too; tuples as lists;
    an open object's other keys beside its fields)."""
    out: dict[str, Any] = _plain(obj)
    return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        rest = next((f.name for f in fields if f.metadata.get(OPEN)), None)
        out = {f.name: _plain(getattr(value, f.name)) for f in fields if f.name != rest}
        if rest is None:
            return out
        return {**{k: v for k, v in out.items() if v is not None},
                **_plain(getattr(value, rest))}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
