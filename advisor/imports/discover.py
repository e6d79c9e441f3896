"""Which runs a --placement's PATH holds: a file, or every file of a known format under a
directory, each read by its format's importer."""

from __future__ import annotations

from pathlib import Path

from advisor.errors import UsageError
from advisor.imports import aiperf, guidellm, vllm
from advisor.imports.tool_runs import Found
from advisor.rundata.files import RunDataError, read_json_object

# aiperf's other files, read (the summary) or of no use here
AIPERF_OTHERS = (aiperf.SUMMARY, "inputs.json")


def runs_at(path_text: str, rate: float | None = None) -> tuple[list[Found], list[str]]:
    """Every run under `path_text`, with `rate` for a single run whose file names none;
    and what was left out, and why. UsageError for a path with no run in it, or a run
    with no rate."""
    path = Path(path_text).expanduser()
    if not path.exists():
        raise UsageError(f"--placement: {path} does not exist")
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".") and (
            aiperf.is_aiperf(p) or (
            p.suffix == ".json" and p.name not in AIPERF_OTHERS)))
    found: list[Found] = []
    skipped: list[str] = []
    for file in files:
        try:
            got, left = _read(file)
        except MALFORMED as e:  # a file someone hands over, shaped as no tool writes it
            raise RunDataError(f"--placement {file}: a {type(e).__name__} reading it "
                               f"({str(e).splitlines()[0][:200] if str(e) else 'no detail'}): "
                               "not a run file as vLLM, aiperf or guidellm write one") from None
        found += got
        skipped += left
    if not found:
        raise UsageError(f"--placement: no run in {path} (vLLM --save-detailed JSON, aiperf "
                         "profile_export.jsonl or guidellm benchmarks.json)"
                         + (f"; left out: {'; '.join(skipped)}" if skipped else ""))
    if rate is not None:
        if len(found) > 1:
            raise UsageError(f"--placement {path}@{rate:g}: @RATE names one run's rate, and "
                             f"{path} holds {len(found)}")
        found[0].rate = rate
    for f in found:
        if f.rate is None:
            raise UsageError(f"--placement: {f.source} does not say the rate it was run at: "
                             "give the file alone as NAME=FILE@RATE")
    return found, skipped


# what a reader of a hostile file's fields can raise, short of a bug in the reader
MALFORMED = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError)


def _read(path: Path) -> tuple[list[Found], list[str]]:
    if aiperf.is_aiperf(path):
        return [aiperf.read(path)], []
    data = read_json_object(path)
    if guidellm.is_guidellm(data):
        return guidellm.read(path, data)
    if vllm.is_vllm(data):
        return [vllm.read(path, data)], []
    return [], [f"{path}: not a format advisor import reads"]
