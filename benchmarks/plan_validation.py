"""`advisor plan` against the guide's three published cases, each run as it was published
(its model, GPUs, workload and placements), beside NVIDIA's aiconfigurator where its
tables cover the GPU, in one run.

For each case prints the published figure, ours, aiconfigurator's (its best collocated
and disaggregated configurations: it picks its own layouts and judges mean TPOT, not the
published placements or tails), and both tools' wall time. Goals: each case under 10 s on
one core (ours runs pinned to core 0 where `taskset` exists); ours at least 3x faster than
aiconfigurator on the same case, the ratio printed.

aiconfigurator runs from .tools/aiconfigurator (`bash .ci/aiconfigurator` installs it);
without it, its columns say so.

Usage: python benchmarks/plan_validation.py [--out DIR] [--no-aiconfigurator]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AICONFIGURATOR = ROOT / ".tools" / "aiconfigurator" / "bin" / "aiconfigurator"
ONE_CORE_GOAL_S = 10.0
SPEED_GOAL = 3.0


# vLLM's script gave its collocated instances --enable-chunked-prefill (vLLM 0.5's budget
# then: 512 tokens a step) and its P/D instances none (a whole prompt a step, up to their
# --max-model-len 30000)
AS_VLLM_RAN = ("--max-num-batched-tokens", "512", "--prefill-max-num-batched-tokens", "30000")


@dataclass(frozen=True)
class Case:
    name: str
    published: str
    plan: tuple[str, ...]  # advisor plan's flags
    aiconfigurator: tuple[str, ...] | None  # its flags; None: its tables lack the GPU
    why_not: str = ""
    # a preset whose config.json it is given as --model-path (its own configs lack it, and
    # it reaches no hub from here)
    local_config: str | None = None
    winner: str = "P/D"  # which placement the published figure favours: P/D or collocated


CASES = (
    Case("MoRI-IO: Qwen3-235B-A22B-FP8, 8 x MI300X, 2000 in / 1000 out, 100 prompts at "
         "8 req/s (vLLM blog, 2026-04-07)",
         "TTFT < 1 s and ITL < 50 ms met by 73/100 P/D (1P1D, TP4 + EP each), 30/100 "
         "collocated 2 x TP4 + EP, 26/100 one TP8",
         ("--model", "qwen3-235b-a22b", "--weights", "fp8", "--gpu", "mi300x", "--gpus", "8",
          "--dataset-name", "random", "--random-input-len", "2000", "--random-output-len",
          "1000", "--rates", "8", "--num-prompts", "100", "--slo", "ttft:1000", "itl:50",
          "--placements", "collocated-2-tp4,collocated-1-tp8,disagg-1p1d-tp4-4"),
         None, "its tables cover no MI300X"),
    Case("llm-d P/D guide: gpt-oss-120b, 16 x H200, 5000 in / 250 out, constant 45 req/s",
         "P/D (8 P TP1, 2 D TP4) against 16 x TP1: mean E2E -59%, P95 -67%",
         ("--model", "gpt-oss-120b", "--gpu", "h200", "--gpus", "8", "--nodes", "2",
          "--dataset-name", "random", "--random-input-len", "5000", "--random-output-len",
          "250", "--arrivals", "constant", "--rates", "45",
          "--placements", "collocated-16,disagg-8p2d-tp1-4"),
         ("--model-path", "openai/gpt-oss-120b", "--total-gpus", "16", "--system", "h200_sxm",
          "--isl", "5000", "--osl", "250", "--ttft", "2000", "--tpot", "50")),
    Case("the guide's L40S case: Qwen2.5-7B, 2 x L40S (PCIe, no NVLink), ~8k in / 256 out, "
         "100 Poisson prompts per rate",
         "p99 ITL at 0.4 req/s: collocated 169 ms, P/D 29 ms (median ITL 21-24 ms in both)",
         ("--model", "qwen2.5-7b", "--gpu", "l40s", "--gpus", "2", "--link", "pcie4",
          "--workload", "long-prompt", "--rates", "0.2,0.4,1,2", "--num-prompts", "100",
          "--placements", "collocated-2,disagg-1p1d"),
         ("--total-gpus", "2", "--system", "l40s", "--isl", "8192", "--osl", "256", "--ttft",
          "2000", "--tpot", "50"), local_config="qwen2.5-7b"),
    # vLLM's own back-to-back run (benchmarks/disagg_benchmarks/results/chunk_vs_disagg.yaml,
    # made by disagg_performance_benchmark.sh): Llama-3.1-70B on 8 x H100, two TP4
    # instances with chunked prefill behind round robin against one TP4 prefiller and one
    # TP4 decoder, 2048-token sonnet prompts, 12 out, 400 prompts a rate
    Case("vLLM's chunked vs disaggregated prefill: Llama-3.1-70B, 8 x H100, 2048 in / 12 "
         "out, 8 req/s (vLLM's chunk_vs_disagg.yaml)",
         "mean TTFT collocated 380 ms, P/D 509 ms (P/D's mean ITL 29 against 64 ms)",
         ("--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "8",
          "--dataset-name", "random", "--random-input-len", "2048", "--random-output-len",
          "12", "--rates", "8", "--num-prompts", "400", *AS_VLLM_RAN,
          "--placements", "collocated-2,disagg-1p1d"),
         ("--total-gpus", "8", "--system", "h100_sxm", "--isl", "2048", "--osl", "12",
          "--ttft", "2000", "--tpot", "50"), local_config="llama-3.1-70b",
         winner="collocated"),
    Case("the same, 2 req/s",
         "mean TTFT collocated 197 ms, P/D 153 ms (P/D's mean ITL 21 against 35 ms)",
         ("--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "8",
          "--dataset-name", "random", "--random-input-len", "2048", "--random-output-len",
          "12", "--rates", "2", "--num-prompts", "400", *AS_VLLM_RAN,
          "--placements", "collocated-2,disagg-1p1d"),
         None, "the 8 req/s case's configuration stands for both"),
)


def plan(case: Case, out: Path) -> tuple[dict[str, dict], float]:
    """Our plan of the case, pinned to one core: its runs by placement, by rate; wall s."""
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    before = set(out.iterdir()) if out.exists() else set()
    t0 = time.perf_counter()
    subprocess.run([*pin, sys.executable, "-m", "advisor.cli", "plan", "--no-report",
                    "--json", "--out", str(out), *case.plan],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    (run_dir,) = set(out.iterdir()) - before
    runs: dict[str, dict] = {}
    for p in (run_dir / "runs").glob("*/rate-*/result.json"):
        r = json.loads(p.read_text())
        runs.setdefault(p.parent.parent.name, {})[r["request_rate"]] = r
    return runs, wall


def ours(case: Case, runs: dict[str, dict]) -> tuple[str, str]:
    """Our figure in the published one's terms, and which placement it favours."""
    if "MI300X" in case.name:
        att = {n: r[8.0]["slo_attainment"] for n, r in runs.items()}
        best = max(v for n, v in att.items() if n.startswith("collocated"))
        return (", ".join(f"{n} {v:.0%}" for n, v in sorted(att.items())),
                "P/D" if att["disagg-1p1d-tp4-4"] > best else "collocated")
    if "H200" in case.name:
        col, pd_ = runs["collocated-16"][45.0], runs["disagg-8p2d-tp1-4"][45.0]
        return (f"mean E2E {pd_['mean_e2el_ms'] / col['mean_e2el_ms'] - 1:+.0%} "
                f"({col['mean_e2el_ms']:.0f} -> {pd_['mean_e2el_ms']:.0f} ms), p99 E2E "
                f"{pd_['p99_e2el_ms'] / col['p99_e2el_ms'] - 1:+.0%}",
                "P/D" if pd_["mean_e2el_ms"] < col["mean_e2el_ms"] else "collocated")
    if "TTFT" in case.published:
        (rate,) = runs["collocated-2"]
        col, pd_ = runs["collocated-2"][rate], runs["disagg-1p1d"][rate]
        return (f"mean TTFT collocated {col['mean_ttft_ms']:.0f} ms, P/D "
                f"{pd_['mean_ttft_ms']:.0f} ms (mean ITL {pd_['mean_itl_ms']:.0f} against "
                f"{col['mean_itl_ms']:.0f} ms)",
                "P/D" if pd_["mean_ttft_ms"] < col["mean_ttft_ms"] else "collocated")
    col, pd_ = runs["collocated-2"][0.4], runs["disagg-1p1d"][0.4]
    return (", ".join(f"{n} p99 ITL {r[0.4]['p99_itl_ms']:.0f} ms (median "
                      f"{r[0.4]['p50_itl_ms']:.0f})" for n, r in sorted(runs.items())),
            "P/D" if pd_["p99_itl_ms"] < col["p99_itl_ms"] else "collocated")


def aiconfigurator(case: Case) -> tuple[str, float | None]:
    """aiconfigurator's best collocated and disaggregated configurations, and its wall s."""
    if case.aiconfigurator is None:
        return f"not run: {case.why_not}", None
    if not AICONFIGURATOR.exists():
        return "not run: not installed (bash .ci/aiconfigurator)", None
    with tempfile.TemporaryDirectory() as save:
        model: list[str] = []
        if case.local_config:
            from engine.api import PRESETS
            from engine.hf_dir import hf_config

            d = Path(save) / "model"
            d.mkdir()
            (d / "config.json").write_text(json.dumps(hf_config(PRESETS[case.local_config],
                                                                "bfloat16")))
            model = ["--model-path", str(d)]
        t0 = time.perf_counter()
        r = subprocess.run([str(AICONFIGURATOR), "cli", "default", "--backend", "vllm",
                            "--save-dir", save, *model, *case.aiconfigurator],
                           capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - t0
    if r.returncode:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"failed (exit {r.returncode}): {tail[0][:160]}", None
    best = {kind: _top_row(r.stdout, kind) for kind in ("agg", "disagg")}
    if not all(best.values()):
        return "ran, but its tables could not be read from its output", wall
    agg, dis = best["agg"], best["disagg"]
    return (f"best collocated {agg['parallel']} {agg['tokens/s/gpu']} tok/s/GPU, request "
            f"latency {agg['request_latency']} ms; best P/D {dis['tokens/s/gpu']} tok/s/GPU, "
            f"request latency {dis['request_latency']} ms"), wall


def _top_row(text: str, kind: str) -> dict[str, str] | None:
    """The first row of aiconfigurator's "<kind> Top Configurations" table, by column."""
    m = re.search(rf"^{kind} Top Configurations.*?\n(\+[-+]+\n)(\|.*?\|)\n\+[-+]+\n(\|.*?\|)\n",
                  text, re.M | re.S)
    if not m:
        return None
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in (m[2], m[3])]
    row = dict(zip(*cells))
    row["parallel"] = row.get("parallel") or row.get("(p)parallel", "")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="parent of the plans' run directories")
    ap.add_argument("--no-aiconfigurator", action="store_true")
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="plan-validation-"))
    right = 0
    for case in CASES:
        runs, wall = plan(case, out)
        said, favours = ours(case, runs)
        right += favours == case.winner
        print(f"\n{case.name}\n  published:      {case.published} ({case.winner} better)"
              f"\n  advisor plan:   {said} ({favours} better: direction "
              f"{'right' if favours == case.winner else 'WRONG'})\n  advisor wall:   "
              f"{wall:.1f} s on one core (goal < {ONE_CORE_GOAL_S:g} s: "
              f"{'met' if wall < ONE_CORE_GOAL_S else 'MISSED'})")
        if a.no_aiconfigurator:
            continue
        said, theirs = aiconfigurator(case)
        print(f"  aiconfigurator: {said}")
        if theirs is not None:
            print(f"  its wall:       {theirs:.1f} s; ours {wall:.1f} s: {theirs / wall:.1f}x "
                  f"faster (goal >= {SPEED_GOAL:g}x, while also predicting tails)")
    print(f"\ndirection right on {right} of {len(CASES)} cases "
          f"({sum(c.winner == 'collocated' for c in CASES)} where collocated measured "
          f"better)\nrun directories under {out}")


if __name__ == "__main__":
    main()
