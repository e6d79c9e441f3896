"""The evidence file: the interface between measuring (sweep, probe) and deciding (recommend).

    {"slo": {"ttft_ms", "itl_ms", "attainment"},
     "collocated": {"p50_itl_ms", "p99_itl_ms", "median_ttft_ms", "p99_ttft_ms",
                    "max_goodput_rps", "attainment_at_rate"},
     "disaggregated": {same} | null,
     "kv_transfer": {"mean_ms", "p90_ms", "gbps", "bytes_per_token", "p2p", "emulated"} | null,
     "workload": {"rate_rps", "mean_prompt_tokens", "mean_output_tokens", "concurrency",
                  "burstiness_cv", "multi_turn", "latency_sensitive", "prefill_ms"},
     "frontend": {"cpu_ms_per_request", "cpu_share", "render_ms_per_request",
                  "derender_ms_per_request", "placement", "requests"} | null}
"""

from __future__ import annotations

import json
from pathlib import Path

_NUM = (int, float)
REQUIRED = {
    "slo": ("ttft_ms", "itl_ms", "attainment"),
    "collocated": ("p99_itl_ms", "median_ttft_ms"),
    "workload": ("mean_prompt_tokens", "concurrency"),
}
NULLABLE = ("disaggregated", "kv_transfer", "frontend")


def validate(ev, where: str = "evidence") -> dict:
    """Return `ev` if it has the required sections and numeric fields; else ValueError naming them."""
    if not isinstance(ev, dict):
        raise ValueError(f"{where}: not a JSON object")
    for section, fields in REQUIRED.items():
        part = ev.get(section)
        if not isinstance(part, dict):
            raise ValueError(f"{where}: missing section {section!r}")
        for f in fields:
            v = part.get(f)
            if v is not None and (not isinstance(v, _NUM) or isinstance(v, bool)):
                raise ValueError(f"{where}: {section}.{f} must be a number, not {v!r}")
            if v is None and section != "collocated":
                raise ValueError(f"{where}: missing {section}.{f}")
    for section in NULLABLE:
        if ev.get(section) is not None and not isinstance(ev[section], dict):
            raise ValueError(f"{where}: {section} must be an object or null")
    return ev


def load(path: str | Path) -> dict:
    """Read and validate an evidence file (a run directory's evidence.json, or any path)."""
    path = Path(path)
    if path.is_dir():
        path = path / "evidence.json"
    try:
        ev = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"evidence file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    return validate(ev, str(path))
