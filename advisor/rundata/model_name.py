"""What a model's name may be wherever it comes from (a flag, an imported file, a run
directory someone hands over): a Hugging Face id, a preset or a local path, printable on one
line, not taken for a flag. Printed commands and manifests carry it; nothing in it may
steer them."""

from __future__ import annotations

from advisor.rundata.files import RunDataError

MAX_CHARS = 256


def checked_model(value: object, where: str) -> str:
    """`value` as a model name; RunDataError naming `where` (the flag, or the file and its
    field) when it is not one."""
    ok = isinstance(value, str) and 0 < len(value) <= MAX_CHARS and value.isprintable() \
        and not value.startswith("-")
    if not ok:
        raise RunDataError(f"{where}: {str(value)[:80]!r} is not a model name (a Hugging Face "
                           f"id, a preset or a path: one printable line of at most {MAX_CHARS} "
                           "characters, not starting with '-')")
    assert isinstance(value, str)
    return value
