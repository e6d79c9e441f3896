"""One self-contained HTML page: inline CSS and SVG, no scripts, fonts or links to fetch.

Every string from the run goes through jinja2's autoescaping; only the SVG that
matplotlib wrote here is inserted as markup.
"""

from __future__ import annotations

import jinja2

from reports.figures import Figure
from reports.model import Report

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                          autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.Undefined)
_ENV.globals["zip"] = zip


def render(data: Report, figures: list[Figure]) -> str:
    """The page as a string, with `figures` (drawn with svg=True) inline."""
    return _ENV.get_template("report.html").render(data=data, rec=data.advice, figures=figures)
