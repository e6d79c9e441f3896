"""`advisor sweep --config FILE`: a sweep's options in one TOML or YAML file (the commands,
URLs, metrics URLs, model, SLO, workload...), so that a sweep can be repeated exactly.
Keys are the long flags' names (`disagg-cmd` or `disagg_cmd`); a flag given on the
command line wins over the file."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from advisor.errors import UsageError
from advisor.sweep.options import SweepOptions

# NOTE: never from a file that may be shared or committed: $OPENAI_API_KEY or --api-key
SECRET = ("api_key",)
NOT_IN_FILE = ("config", *SECRET)


def load(path: str) -> dict[str, Any]:
    """The options in `path`, by SweepOptions field name; UsageError naming the file and
    the bad key or value."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--config {path}: no such file")
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(p.read_text())
        elif p.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(p.read_text())
        else:
            raise UsageError(f"--config {path}: expected a .toml, .yaml or .yml file")
    except (tomllib.TOMLDecodeError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise UsageError(f"--config {path}: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise UsageError(f"--config {path}: nests deeper than its parser follows") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a table of options at the top level")
    fields = {f.name: f for f in dataclasses.fields(SweepOptions)}
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in fields or name in NOT_IN_FILE:
            why = " (a secret: use $OPENAI_API_KEY)" if name in SECRET else ""
            raise UsageError(f"--config {path}: unknown key {key!r}{why}")
        out[name] = _typed(path, key, value, fields[name])
    return out


def _typed(path: str, key: str, value: Any, f: dataclasses.Field[Any]) -> Any:
    """`value` as the field's type: through its flag's own parser where it has one (the SLO
    from its NAME:MS items, --engine, --rates as text); lists become tuples; a lone string
    a 1-tuple."""
    flag = f.metadata.get("flag")
    if flag is not None and flag.parse is not None:
        if flag.words:
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise UsageError(f"--config {path}: {key} must be a list of NAME:MS texts")
            return _parsed(path, flag.parse, items)
        if isinstance(value, str):
            return _parsed(path, flag.parse, value)
    if "tuple" in str(f.type):
        value = [value] if isinstance(value, str | int | float) else value
        if not isinstance(value, list):
            raise UsageError(f"--config {path}: {key} must be a list")
        return tuple(value)
    names = [t for t in _SCALARS if t in str(f.type)]
    ok = any(isinstance(value, _SCALARS[t]) and not (isinstance(value, bool) and t != "bool")
             for t in names)
    if not ok:
        raise UsageError(f"--config {path}: {key} must be of type {' or '.join(names)}, "
                         f"not {value!r}")
    return float(value) if names == ["float"] else value


def _parsed(path: str, parse: Callable[[Any], Any], value: Any) -> Any:
    """`parse(value)`, its UsageError naming the file as well as the option."""
    try:
        return parse(value)
    except UsageError as e:
        raise UsageError(f"--config {path}: {e}") from None


_SCALARS: dict[str, type | tuple[type, ...]] = {"str": str, "float": (int, float), "int": int,
                                                "bool": bool}


def merged(cli: SweepOptions, path: str) -> SweepOptions:
    """`cli` with the file's values wherever the command line left the default."""
    default = SweepOptions()
    taken = {k: v for k, v in load(path).items() if getattr(cli, k) == getattr(default, k)}
    return dataclasses.replace(cli, **taken, config=str(Path(path).resolve()))
