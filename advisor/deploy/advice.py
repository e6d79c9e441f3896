"""The deploy section of a recommendation: the commands for every placement measured,
shaped as measured, the advised one named, its P/D pairs on GPUs with P2P where the matrix
has them, and what each action asks of the operator besides (fix the transfer, measure)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from advisor.deploy.origin import Origin, elsewhere
from advisor.deploy.vllm import (
    DECODE_OFFSET,
    GPU,
    PROXY_OFFSET,
    Runtime,
    Site,
    collocated,
    disaggregated,
    render_split,
    replicas_behind_front,
)
from advisor.errors import UsageError
from advisor.probe.p2p import P2PMatrix
from advisor.probe.p2p_pairs import pairs_text, place
from advisor.probe.shapes import HF_NAMES, shape_of
from advisor.rundata.evidence import Evidence
from advisor.rundata.recommendation import DeployCommands, DeployPlan, Recommendation

ACTION_PLAN = {"disaggregate": "disaggregated",
               "disaggregate-bidirectional": "disaggregated-bidirectional",
               "stay-collocated": "collocated", "split-render-tier": "render-split",
               # the guide: fix the transfer, or stay collocated until it is fixed
               "fix-transfer": "collocated"}
# model families -> vLLM's reasoning and tool-call parser flags (vLLM's docs:
# features/reasoning_outputs.md, features/tool_calling.md); first match wins
PARSERS = (("qwen3", ("--reasoning-parser", "qwen3", "--enable-auto-tool-choice",
                      "--tool-call-parser", "hermes")),
           ("qwq", ("--reasoning-parser", "deepseek_r1", "--enable-auto-tool-choice",
                    "--tool-call-parser", "hermes")),
           ("deepseek-r1", ("--reasoning-parser", "deepseek_r1")),
           ("deepseek", ("--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v3")),
           ("qwen2", ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")),
           ("llama", ("--enable-auto-tool-choice", "--tool-call-parser", "llama3_json")),
           ("mistral", ("--enable-auto-tool-choice", "--tool-call-parser", "mistral")))


@dataclass(frozen=True)
class Where:
    """What the operator says of the machines: GPU indices (None: 0..N-1, or every GPU of
    the matrix), hosts and ports (Site), the P2P matrix, the proxy (vllm or advisor), and
    each instance's tensor parallelism."""

    gpus: tuple[int, ...] | None = None
    site: Site = field(default_factory=Site)
    matrix: P2PMatrix | None = None
    proxy: str = "vllm"
    tp: int = 1


def parsers_for(model: str | None) -> tuple[str, ...]:
    """vLLM's parser flags for `model`'s family: by its name, or by the model_type of a
    local directory's config.json; none for a family not listed."""
    name = (model or "").lower()
    config = Path(model or "") / "config.json"
    if model and config.is_file():
        try:
            name = str(json.loads(config.read_text()).get("model_type", "")).lower()
        except (OSError, ValueError):
            return ()
    return next((flags for key, flags in PARSERS if key in name), ())


def section(rec: Recommendation, collocated_name: str | None, disagg_name: str | None,
            model: str | None, where: Where = Where(), frontend_cpu_ms: float | None = None,
            peak_rps: float | None = None) -> DeployCommands:
    """The commands for every placement measured (shaped as measured: `collocated-N`,
    `disagg-XpYd`), the recommended one named (None where the advice is no placement:
    measure-first). ValueError where the GPUs given are too few or not in the matrix."""
    prefill, decode = _shape(disagg_name)
    replicas = _replicas(collocated_name) or 1
    tp, site = tps(collocated_name, where.tp)[0], where.site
    dp = _dp_width(collocated_name)
    name, notes = _model_name(model)
    experts, hybrid = _layers(model)
    runtime = Runtime(flags=("--enable-expert-parallel",)) if experts else GPU
    ptp, dtp = tps(disagg_name, where.tp)
    if hybrid and ptp != dtp:
        raise UsageError(f"--model {model}: its Mamba (SSM) layers' state moves only between "
                         f"equal TP in vLLM, but {disagg_name} has prefill TP {ptp} and decode "
                         f"TP {dtp}")
    plans: list[DeployPlan] = []
    used: set[int] = set()
    if collocated_name:
        gpus = list(where.gpus or range(replicas * (dp or tp)))
        if dp:  # one server per instance: DP attention over its ranks, experts over all
            plans.append(collocated(name, gpus, 1, site, runtime))
        elif experts and replicas > 1:  # vLLM's DP would join the replicas' experts
            plans.append(replicas_behind_front(name, [gpus[i:i + tp] for i in
                                                      range(0, len(gpus), tp)], site, runtime))
        else:
            plans.append(collocated(name, gpus, tp, site, runtime))
        used |= set(gpus)
    action = rec.action
    if disagg_name or action in ("disaggregate", "disaggregate-bidirectional", "fix-transfer"):
        groups, placed = _pd_groups(where, prefill, decode, ptp, dtp)
        plan = disaggregated(name, groups, prefill, decode,
                             action == "disaggregate-bidirectional", site, where.proxy, runtime)
        plans.append(DeployPlan(plan.placement, plan.commands, [*placed, *plan.notes]))
        used |= {g for group in groups for g in group}
    if "split-render-tier" in (action, *rec.secondary_actions):
        gpus = list(where.gpus or range(replicas * tp))
        groups = [gpus[i * tp:(i + 1) * tp] for i in range(len(gpus) // tp)]
        plans.append(render_split(name, groups, frontend_cpu_ms, peak_rps,
                                  parsers_for(model), site, tp, runtime))
        used |= set(gpus)
    return DeployCommands(name, sorted(used), ACTION_PLAN.get(action), plans,
                      notes + _action_notes(action, site))


def _pd_groups(where: Where, prefill: int, decode: int, tp: int, dtp: int
               ) -> tuple[list[list[int]], list[str]]:
    """Each P/D instance's GPUs on its host (prefillers `tp` wide, decoders `dtp`), and what
    the placement says of P2P: on one host with a matrix, the pairs with P2P
    (advisor.probe.p2p_pairs.place); on several, each host's GPUs in order (the KV crosses
    hosts over RDMA, not P2P)."""
    site = where.site
    if len(site.hosts) > 1:
        per_host = -(-(prefill + decode) // len(site.hosts))
        wide = max(tp, dtp)
        gpus = list(where.gpus or range(per_host * wide))
        if per_host * wide > len(gpus):
            raise ValueError(f"{per_host} instances per host need {per_host * wide} GPUs; "
                             f"{len(gpus)} given")
        widths = [tp] * prefill + [dtp] * decode
        return [gpus[(i // len(site.hosts)) * wide:(i // len(site.hosts)) * wide + w]
                for i, w in enumerate(widths)], []
    matrix = where.matrix
    gpus = list(where.gpus or (range(len(matrix.gpus)) if matrix else
                               range(prefill * tp + decode * dtp)))
    placed = place(matrix, gpus, prefill, decode, tp, dtp)
    if matrix is None:
        return placed.prefill + placed.decode, []
    pairs = ", ".join(f"GPU{p.prefill_gpu}->GPU{p.decode_gpu} {p.status}" for p in placed.pairs)
    return placed.prefill + placed.decode, [
        f"placed by the P2P matrix: {placed.how} ({pairs}; pairs with P2P here: "
        f"{pairs_text([list(p) for p in matrix.ok_pairs()])})"]


def _action_notes(action: str, site: Site) -> list[str]:
    host = site.address(site.host(0))
    proxy = f"http://{host}:{site.base_port + PROXY_OFFSET}"
    if action == "fix-transfer":
        return ["the KV transfer is slow: stay collocated until it is fixed (P and D on GPU "
                "pairs with P2P, UCX_NET_DEVICES on the RDMA devices), then check it with "
                f"advisor probe --transfer-check {proxy} --metrics-url "
                f"http://{host}:{site.base_port + DECODE_OFFSET}/metrics and sweep again"]
    if action == "measure-first":
        return ["nothing measured decides: run both and measure them with advisor sweep "
                f"--collocated-url http://{host}:{site.base_port} --disagg-url {proxy}"]
    return []


def _model_name(model: str | None) -> tuple[str, list[str]]:
    if model in HF_NAMES:
        return HF_NAMES[model], []
    if not model or model in ("tiny", "mini", "small"):
        return "MODEL", [f"the bundled preset {model or 'of the sweep'!r} is no published "
                         "model: put yours in place of MODEL (or pass --model)"]
    return model, []


def _shape(name: str | None) -> tuple[int, int]:
    """disagg-XpYd[-tpA-B] -> (X, Y); (1, 1) for a deployment whose shape the sweep did
    not set."""
    shape = (name or "").removeprefix("disagg-").partition("-tp")[0]
    p, _, d = shape.removesuffix("d").partition("p")
    return (int(p), int(d)) if p.isdigit() and d.isdigit() else (1, 1)


def _replicas(name: str | None) -> int | None:
    n = (name or "").removeprefix("collocated-").partition("-")[0]
    return int(n) if n.isdigit() else None


def _dp_width(name: str | None) -> int:
    """collocated-N-dpT (a plan's DP attention + EP instance) -> T; 0 otherwise."""
    tail = (name or "").partition("-dp")[2]
    return int(tail) if tail.isdigit() else 0


def _layers(model: str | None) -> tuple[bool, bool]:
    """(whether `model` has routed experts, whether it has SSM layers), where its shape is
    known (a preset, a published name or a local config.json); (False, False) otherwise."""
    try:
        shape = shape_of(model) if model else None
    except ValueError:
        return False, False
    return (bool(shape.experts), shape.kind == "hybrid") if shape else (False, False)


def tps(name: str | None, default: int) -> tuple[int, int]:
    """The TP sizes a plan's placement name carries: collocated-N-tpT -> (T, T),
    disagg-XpYd-tpA-B -> (A, B) (prefill's, decode's); (default, default) otherwise."""
    sizes = (name or "").partition("-tp")[2].split("-")
    if all(t.isdigit() for t in sizes) and 1 <= len(sizes) <= 2:
        return int(sizes[0]), int(sizes[-1])
    return default, default


def from_evidence(rec: Recommendation, ev: Evidence, model: str | None,
                  where: Where = Where(),
                  came: Origin | None = None, run_path: str | None = None) -> DeployCommands:
    """`section` for a sweep's or plan's evidence (advisor.rundata.evidence.Evidence), its
    P/D placed on the P2P matrix the evidence recorded unless `where` names one; said to be
    measured elsewhere (`measured_elsewhere`) where `came` is not `model` on GPUs."""
    dis = ev.disaggregated
    peak = max([s.max_goodput_rps or 0.0 for s in (ev.collocated, dis) if s] or [0.0])
    if where.matrix is None and ev.p2p is not None and len(where.site.hosts) < 2:
        where = Where(where.gpus, where.site, P2PMatrix(ev.p2p.gpus, ev.p2p.status,
                                                        ev.p2p.paths), where.proxy, where.tp)
    out = section(rec, ev.collocated.placement if ev.collocated else None,
                  dis.placement if dis else None, model, where,
                  ev.frontend.cpu_ms_per_request if ev.frontend else None, peak or None)
    return measured_elsewhere(out, came, model, run_path) if came else out


def measured_elsewhere(d: DeployCommands, came: Origin, model: str | None,
                       run_path: str | None) -> DeployCommands:
    """`d` saying where its evidence came from, and, where that is not `model` on GPUs, that
    its commands are the favoured placement's shape only, with the commands that would
    measure or predict the real target."""
    why = elsewhere(came, model)
    if why is None:
        return dataclasses.replace(d, measured_on=came.text)
    n = len(d.gpus) or 1
    calibrate = f" --calibrate {run_path}" if run_path and came.kind in ("cpu", "gpu") else ""
    notes = [f"MEASURED ELSEWHERE ({why}): the advice came from {came.text}; below is the "
             f"shape of the placement it favoured, not a recommendation for {d.model} on "
             "these GPUs",
             f"to measure the target: advisor sweep --engine vllm --model {d.model} on "
             f"those {n} GPUs; to predict it: advisor plan --model {d.model} --gpu GPU "
             f"--gpus {n}{calibrate}"]
    return dataclasses.replace(d, measured_on=came.text, elsewhere=why,
                               notes=[*notes, *d.notes])
