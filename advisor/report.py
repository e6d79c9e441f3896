"""`advisor report`: a run directory -> report.html and report.md (+ PNGs) in it."""

from __future__ import annotations

from pathlib import Path

from advisor.errors import UsageError
from reports import html, markdown, model
from reports.figures import draw

FORMATS = ("html", "md")


def run_report(
    run_dir: str, formats: tuple[str, ...] = FORMATS, compare: str | None = None
) -> list[Path]:
    """Write the asked formats into the run directory; return their paths.
    UsageError names the file when the directory cannot make a report."""
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UsageError(f"--format {','.join(formats)}: choose from {', '.join(FORMATS)}")
    data = model.load(run_dir)
    other = model.load(compare) if compare else None
    figures = draw(data, other, svg="html" in formats, png="md" in formats)
    out = []
    if "html" in formats:
        out.append(html.write(data, data.run_dir.file("report.html"), figures))
    if "md" in formats:
        out.append(markdown.write(data, data.run_dir.file("report.md"), figures))
    return out
