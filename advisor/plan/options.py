"""`advisor plan`'s options, each with its flag; kept apart from the planner so that the
command line loads no simulator to list them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from advisor.errors import UsageError
from advisor.flag_groups import slo_option
from advisor.flags import option
from advisor.measure.stats import parse_rates
from advisor.plan.hardware import GPUS
from advisor.probe.shapes import SHAPE_ONLY
from advisor.rundata.bounds import MAX_BATCHED_TOKENS, MAX_CONCURRENCY
from advisor.rundata.slo import DEFAULT_SLO, Slo
from workloads.presets import PRESETS

DEFAULT_MODEL = "qwen2.5-7b"
DEFAULT_PROMPTS = 1000


def _p2p(text: str | None) -> str:
    """--p2p auto|yes|no (None: auto); UsageError otherwise."""
    if text not in (None, "auto", "yes", "no"):
        raise UsageError(f"--p2p must be auto, yes or no, not {text!r}")
    return text or "auto"


WEIGHTS = ("fp8", "bf16", "int4")
KV_DTYPES = ("fp8", "bf16")


def _names(text: str | None) -> tuple[str, ...]:
    """--placements NAME,...: the names as given, each once."""
    if not text:
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageError(f"--placements {text!r}: expected names such as collocated-2,"
                         "disagg-1p1d")
    return names


def _choice(flag: str, allowed: tuple[str, ...]) -> Callable[[str | None], str | None]:
    def parse(text: str | None) -> str | None:
        if text is not None and text.lower() not in allowed:
            raise UsageError(f"{flag} must be one of {', '.join(allowed)}, not {text!r}")
        return text.lower() if text is not None else None
    return parse


@dataclass(frozen=True)
class PlanOptions:
    """`advisor plan`'s options, each with its flag (advisor.flags)."""

    # None: DEFAULT_MODEL; with --calibrate, the sweep's
    model: str | None = option(None, f"preset name (also {', '.join(SHAPE_ONLY)}) or "
                                     f"a local config.json dir (default {DEFAULT_MODEL}; with "
                                     "--calibrate, the sweep's)")
    gpu: str = option("l40s", ", ".join(GPUS))
    weights: str | None = option(None, "weights' precision: fp8, bf16 or int4 (default: what "
                                       "the model's config.json says, else bf16)",
                                 parse=_choice("--weights", WEIGHTS))
    kv_dtype: str = option("bf16", "KV cache precision: fp8 or bf16",
                           parse=_choice("--kv-dtype", KV_DTYPES))
    gpus: int = option(2, "how many of them (with --nodes: per node)")
    nodes: int = option(1, "hosts the GPUs are on, --gpus each; KV between them crosses "
                           "--inter-node", min=1)
    inter_node: str = option("rdma-400g", "the link between nodes: rdma-100g, rdma-400g, "
                                          "tcp-25g or a rate such as 50GBps")
    link: str | None = option(None, "KV link: pcie4, pcie5, nvlink, rdma-100g, rdma-400g, "
                                    "tcp-25g or a rate such as 25GBps (default: the GPUs')")
    p2p: str = option("auto", "GPU peer-to-peer copies work: auto (from --p2p-matrix or "
                              "nvidia-smi, else assumed yes), yes or no", parse=_p2p)
    p2p_matrix: str | None = option(None, "a saved `nvidia-smi topo -p2p r` (or topo -m) output "
                                          "of the GPUs planned for (with --p2p auto)")
    workload: str = option("long-prompt", f"workload preset: {', '.join(PRESETS)}")
    # vllm bench serve's spelling of a fixed-length workload, as publications give theirs
    dataset_name: str | None = option(None, "random: vllm bench's random dataset, lengths from "
                                            "--random-input-len and --random-output-len "
                                            "(instead of --workload)", "--dataset-name",
                                      parse=_choice("--dataset-name", ("random",)))
    random_input_len: int = option(1024, "random: prompt tokens", min=1)
    random_output_len: int = option(128, "random: output tokens", min=1)
    random_range_ratio: float = option(0.0, "random: lengths uniform in len*(1 +- r)", min=0,
                                       max=0.99)
    arrivals: str = option("poisson", "arrival process: poisson, constant, or gamma:CV (gaps "
                                      "with that coefficient of variation)")
    max_concurrency: int | None = option(None, "at most this many requests in flight, as "
                                               "vllm bench serve's --max-concurrency (with a "
                                               "rate above what it lets through: a closed "
                                               "loop)", min=1, max=MAX_CONCURRENCY)
    placements: tuple[str, ...] = option((), "only these placements, named as the plan names "
                                             "them (e.g. collocated-2-tp4,disagg-1p1d-tp4-4)",
                                         parse=_names)
    scale: float = option(1.0, "prompt length scale (1.25: long-prompt's ~8k tokens as ~10k)")
    output_scale: float = option(1.0, "output length scale (4: long-prompt's 256 as 1024)")
    slo: Slo = slo_option(DEFAULT_SLO, "SLOs in ms: ttft, tpot, e2el, itl (per request) or p99_itl "
                                        "(pooled) (default ttft:2000 p99_itl:50)")
    attainment: float = option(0.9, "share of requests that must meet every SLO")
    rates: tuple[float, ...] = option((), "rates to simulate, e.g. 0.2,0.4,1 (default: a grid "
                                          "up to what the GPUs could prefill)", parse=parse_rates)
    # None: 1000, judged as a sweep judges; given: each run judged on what it measured, as
    # a publication's run of that many prompts was
    num_prompts: int | None = option(None, "simulated requests per rate (default 1000; given, "
                                           "each run is judged on what it served, as a "
                                           "benchmark of that many prompts is)")
    max_num_batched_tokens: int | None = option(None, "engine token budget per step (default: "
                                                      "vLLM's for the GPU)", min=1,
                                                max=MAX_BATCHED_TOKENS)
    prefill_max_num_batched_tokens: int | None = option(
        None, "P/D's prefill tier's own token budget per step (default: "
              "--max-num-batched-tokens)", min=1, max=MAX_BATCHED_TOKENS)
    operating_rate: float | None = option(None, "your production rate (req/s)")
    seed: int = option(0, "workload seed")
    out: str = option("results", "parent of the run directory")
    as_json: bool = option(False, "print JSON", "--json")
    report: bool = option(True, "draw report.html and report.md (`advisor report RUN_DIR` "
                                "draws them later)", "--report/--no-report")
    dtype: str = "bfloat16"
    # what the evidence builder asks of a sweep's options
    bundled: bool = False
    local: bool = False
    connector: str | None = None
    device: str = "cuda"

    @property
    def judged_slo(self) -> Slo:
        """The SLO runs are judged against."""
        return self.slo

    @property
    def requests(self) -> int:
        """Simulated requests per rate."""
        return self.num_prompts or DEFAULT_PROMPTS

    @property
    def workload_name(self) -> str:
        """The workload as runs and the run directory name it."""
        if self.dataset_name:
            return f"random-{self.random_input_len}-{self.random_output_len}"
        return self.workload
