"""The GPU checks, in one run, every figure into one JSON file: the engine on the device
against the naive reference (greedy output token for token, `tiny` and `small`), the cuda
connector's pull against a raw torch copy of the same bytes, the live `nvidia-smi topo -p2p
r` parsed, and a short sweep. `--dry-run` takes the same steps on the CPU (the shm
connector, a recorded P2P output, a smaller sweep), so the suite knows the script works.

Usage: python scripts/device_check.py [--dry-run] [--out FILE]   (scripts/device_check.sh)
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECORDED_P2P = ROOT / "tests" / "advisor" / "fixtures" / "p2p_8gpu.txt"
PROMPTS, MAX_TOKENS = 4, 8


def environment(device: str) -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda_available": torch.cuda.is_available(), "device": device}
    if device == "cuda":
        out.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(),
                   capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    return out


def correctness(device: str) -> dict:
    """Greedy tokens of the paged engine on `device` against the naive full-recompute
    reference on the CPU, from the same weights, for each preset."""
    from engine.core.sequence import SamplingParams
    from engine.llm import LLM
    from engine.model.weights import hf_state_dict
    from tests.engine.helpers import random_prompts
    from tests.engine.reference import reference_greedy

    out = {}
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    for model in ("tiny", "small"):
        llm = LLM(model, device=device, dtype="float32", seed=0)
        prompts = random_prompts(PROMPTS, (5, 60), vocab=llm.config.vocab_size, seed=7)
        t = time.perf_counter()
        got = [o.token_ids for o in llm.generate(prompts, params)]
        engine_s = time.perf_counter() - t
        sd = {k: v.cpu() for k, v in hf_state_dict(llm.engine.runner.model).items()}
        want = [reference_greedy(sd, llm.config, p, MAX_TOKENS) for p in prompts]
        out[model] = {"prompts": len(prompts), "tokens_each": MAX_TOKENS,
                      "identical": got == want, "engine_s": engine_s,
                      "mismatched": [i for i, (g, w) in enumerate(zip(got, want)) if g != w]}
    return out


def transfer(device: str) -> dict:
    import torch

    from engine.kv.loopback import connector_against_copy

    return connector_against_copy(torch.device(device), (256 if device == "cuda" else 32) << 20)


def p2p(dry_run: bool) -> dict:
    from advisor.probe import p2p as parser

    if dry_run:
        matrix, source = parser.parse(RECORDED_P2P.read_text()), str(RECORDED_P2P)
    else:
        matrix, source = parser.query(), "nvidia-smi topo -p2p r"
    if matrix is None:
        raise RuntimeError("nvidia-smi topo -p2p r gave no matrix")
    return {"source": source, **matrix.to_json(), "p2p_pairs": matrix.ok_pairs()}


def sweep(device: str, dry_run: bool, timeout_s: float) -> dict:
    """A short sweep of the bundled engine; its recommendation and wall time."""
    out_dir = Path(tempfile.mkdtemp(prefix="device-check-"))
    args = ["--model", "tiny", "--topologies", "collocated:1,disagg:1p1d", "--rates", "2",
            "--num-prompts", "8"] if dry_run else ["--device", "cuda", "--model", "small",
                                                   "--time-budget", "150"]
    cmd = [sys.executable, "-m", "advisor.cli", "sweep", *args, "--out", str(out_dir),
           "--no-report"]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"sweep exited {r.returncode}: {r.stderr.strip()[-500:]}")
    (run,) = [p for p in out_dir.iterdir() if p.is_dir()]
    rec = json.loads((run / "recommendation.json").read_text())
    ev = json.loads((run / "evidence.json").read_text())
    return {"command": " ".join(cmd[1:]), "wall_s": wall, "action": rec["action"],
            "reasons": rec["reasons"], "kv_transfer": ev.get("kv_transfer"),
            "collocated_max_goodput_rps": ev["collocated"].get("max_goodput_rps"),
            "disaggregated_max_goodput_rps": (ev.get("disaggregated") or {}).get(
                "max_goodput_rps"), "run_dir": str(run)}


def step(report: dict, name: str, fn: Callable[[], dict]) -> None:
    """Run one check into `report`: its figures and seconds, or its error; said as it goes."""
    print(f"[device-check] {name} ...", flush=True)
    t = time.perf_counter()
    try:
        report[name] = {"ok": True, **fn()}
    except Exception as e:  # NOTE: one failed check must not cost the others' figures
        report[name] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                        "trace": traceback.format_exc(limit=5)}
    report[name]["seconds"] = time.perf_counter() - t
    print(f"[device-check] {name}: {'ok' if report[name]['ok'] else report[name]['error']} "
          f"({report[name]['seconds']:.1f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="the same steps on the CPU")
    ap.add_argument("--out", default="device_check.json", help="the JSON file of figures")
    ap.add_argument("--sweep-timeout", type=float, default=240.0)
    a = ap.parse_args(argv)
    device = "cpu" if a.dry_run else "cuda"
    report: dict = {"dry_run": a.dry_run, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    step(report, "environment", lambda: environment(device))
    step(report, "correctness", lambda: correctness(device))
    step(report, "transfer", lambda: transfer(device))
    step(report, "p2p", lambda: p2p(a.dry_run))
    step(report, "sweep", lambda: sweep(device, a.dry_run, a.sweep_timeout))
    failed = [k for k, v in report.items() if isinstance(v, dict) and not v["ok"]]
    failed += [f"correctness/{m}" for m, v in report["correctness"].items()
               if isinstance(v, dict) and not v.get("identical", True)]
    report["failed"] = failed
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(a.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str))
    tmp.replace(a.out)
    print(f"[device-check] figures in {a.out}" + (f"; failed: {', '.join(failed)}" if failed
                                                  else "; every check passed"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
