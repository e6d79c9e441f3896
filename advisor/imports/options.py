"""`advisor import`'s options, each with its flag (advisor.flags)."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.errors import UsageError
from advisor.flag_groups import slo_option
from advisor.flags import option
from advisor.measure.stats import check_judged
from advisor.rundata.bounds import placement_name
from advisor.rundata.slo import DEFAULT_SLO, Slo

KINDS = ("collocated", "disagg")


@dataclass(frozen=True)
class ImportOptions:
    """`advisor import`'s options, each with its flag (advisor.flags)."""

    placement: tuple[str, ...] = option(
        (), "NAME=PATH[@RATE]: a placement's runs (repeat the flag per placement). NAME is "
            "collocated or disagg (or starts with one: collocated-4); PATH a file or "
            "directory of vLLM --save-detailed results, aiperf profile_export.jsonl or "
            "guidellm benchmarks.json; @RATE only for a file that does not say its rate")
    slo: Slo = slo_option(DEFAULT_SLO, "SLOs in ms: ttft, tpot, e2el, itl (per request) or p99_itl "
                                        "(pooled) (default ttft:2000 p99_itl:50)")
    attainment: float = option(0.9, "share of requests that must meet every SLO")
    operating_rate: float | None = option(None, "your production rate (req/s)")
    model: str | None = option(None, "the model served, for the deploy commands (default: "
                                     "the one the files name)")
    out: str = option("results", "parent of the run directory")
    as_json: bool = option(False, "print JSON", "--json")
    report: bool = option(True, "draw report.html and report.md (`advisor report RUN_DIR` "
                                "draws them later)", "--report/--no-report")
    # what the evidence builder asks of a sweep's options
    bundled: bool = False
    local: bool = False
    connector: str | None = None
    device: str = "cuda"
    dtype: str = "bfloat16"

    @property
    def judged_slo(self) -> Slo:
        """The SLO runs are judged against."""
        return self.slo

    def validate(self) -> None:
        check_judged(self.slo, self.attainment, self.operating_rate)
        if not self.placement:
            raise UsageError("--placement: give at least one, e.g. --placement "
                             "collocated=DIR --placement disagg=DIR")


@dataclass(frozen=True)
class Given:
    """One --placement: its name, kind, path and the rate given for it (if any)."""

    name: str
    kind: str
    path: str
    rate: float | None


def parse_placement(item: str) -> Given:
    """NAME=PATH[@RATE] -> Given; UsageError naming --placement otherwise."""
    name, sep, rest = item.partition("=")
    name = name.strip()
    kind = next((k for k in KINDS if name == k or name.startswith(k + "-")), None)
    if not sep or not rest or kind is None or not name.replace("-", "").isalnum():
        raise UsageError(f"--placement {item!r}: expected NAME=PATH[@RATE] with NAME "
                         "collocated or disagg (or starting collocated- / disagg-)")
    try:
        placement_name(name)
    except ValueError as e:
        raise UsageError(f"--placement {item[:100]!r}: {e}") from None
    path, at, rate_text = rest.rpartition("@") if "@" in rest else (rest, "", "")
    rate = None
    if at:
        try:
            rate = float(rate_text)
        except ValueError:
            raise UsageError(f"--placement {item!r}: {rate_text!r} after @ is not a rate "
                             "(req/s)") from None
        if not rate > 0:
            raise UsageError(f"--placement {item!r}: the rate must be > 0")
    return Given(name, kind, path, rate)
