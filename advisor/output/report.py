"""`advisor report`: a run directory -> report.html and report.md (+ PNGs) in it."""

from __future__ import annotations

from pathlib import Path

from advisor.errors import UsageError
from advisor.output.report_data import load
from advisor.rundata.files import write_atomic
from reports import html, markdown
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
    data = load(run_dir)
    other = load(compare) if compare else None
    figures = draw(data, other, svg="html" in formats, png="md" in formats)
    out = Path(run_dir)
    written = []
    if "html" in formats:
        write_atomic(out / "report.html", html.render(data, figures))
        written.append(out / "report.html")
    if "md" in formats:
        # NOTE: each file replaced by a rename, never written through a link at its name
        for fig in figures:
            if fig.png is not None:  # drawn with PNGs here (png=True)
                write_atomic(out / markdown.png_name(fig), fig.png)
        write_atomic(out / "report.md", markdown.render(data, figures))
        written.append(out / "report.md")
    return written
