"""Run outputs as data: atomic writes, reads that name the file, secrets redacted."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import orjson

from advisor.errors import UsageError


class RunDataError(UsageError):
    """A run directory's file (or one the user named) is missing, corrupt or malformed."""


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` to a temporary file beside `path`, flush it to disk, then rename it over
    `path`: a symlink at `path` is replaced, never written through."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; results are for reading
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; RunDataError naming it when missing, unreadable, corrupt
    or not an object."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunDataError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RunDataError(f"cannot read {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise RunDataError(f"{path} is not valid JSON: {e}") from None
    except RecursionError:
        raise RunDataError(f"{path} nests deeper than a JSON parser follows") from None
    if not isinstance(data, dict):
        raise RunDataError(f"{path} is not a JSON object")
    return data


def write_json(path: str | Path, obj: object) -> None:
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    # orjson: a plan writes ten thousand rows of chunk times, json.dumps took seconds
    write_atomic(path, b"".join(orjson.dumps(r, default=str, option=_JSONL) + b"\n"
                                for r in rows))


_JSONL = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def json_line(line: str) -> Any:
    """One JSON Lines row, or None where it is not JSON (NaN and Infinity, which older
    files may hold and orjson refuses, are read as Python's json reads them)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return None


# a flag or config key whose value is a secret: --api-key, --hf-token, client_secret, ...
# (a name ending in the word, so that max_num_batched_tokens is none)
_SECRET = re.compile(r"(^|[-_])(key|token|secret|password|passwd|credentials?)$", re.IGNORECASE)
REDACTED = "<redacted>"


def redacted_argv(argv: list[str]) -> list[str]:
    """`argv` with the value of every secret flag (`--api-key K`, `--api-key=K`) replaced."""
    out, hide = [], False
    for a in argv:
        if hide:
            out.append(REDACTED)
            hide = False
        elif a.startswith("-") and _SECRET.search(a.split("=", 1)[0].lstrip("-")):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(a)
                hide = True
        else:
            out.append(a)
    return out


def redacted_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with every secret-named key's value (where set) replaced."""
    return {k: (REDACTED if v is not None and _SECRET.search(k) else v)
            for k, v in config.items()}
