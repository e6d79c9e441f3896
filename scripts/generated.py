"""A file generated from the code: written by its script, or (`--check`) compared with
what the script would write now, so that a test can say it is stale."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(out: Path, text: str, script: str, argv: list[str]) -> int:
    """Write `text` to `out`; with `--check` in `argv`, exit code 1 where `out` differs."""
    if "--check" in argv:
        if not out.is_file() or out.read_text() != text:
            print(f"{out} is out of date: python scripts/{script}", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    print(out)
    return 0
