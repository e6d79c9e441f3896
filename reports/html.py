"""One self-contained HTML page: inline CSS and SVG, no scripts, fonts or links to fetch.

Every string from the run goes through jinja2's autoescaping; only the SVG that
matplotlib wrote here is inserted as markup.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from advisor.rundata.fmt import fmt_items
from reports import model
from reports.figures import Figure
from reports.model import ReportData

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                          autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.Undefined)
_ENV.filters["kv"] = fmt_items
_ENV.globals["zip"] = zip


def render(data: ReportData, figures: list[Figure]) -> str:
    """The page as a string, with `figures` (drawn with svg=True) inline."""
    columns, rows = model.table(data)
    return _ENV.get_template("report.html").render(
        data=data, rec=data.recommendation, figures=figures, columns=columns, rows=rows,
        cores_note=model.cores_note(data),
        setup=model.setup(data), p2p=((data.manifest or {}).get("probe") or {}).get("p2p"),
        created=(data.manifest or {}).get("created"))


def write(data: ReportData, path: Path, figures: list[Figure]) -> Path:
    from advisor.rundata.files import write_atomic

    write_atomic(path, render(data, figures))
    return path
