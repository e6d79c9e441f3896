"""The vLLM commands that run a placement, wired as the guide wires them: collocated (one
`vllm serve` with data parallelism over the GPUs), disaggregated (one `vllm serve` per
prefiller and decoder with a NixlConnector `--kv-transfer-config`, each with its own
side-channel port, GPU and UCX device, behind vLLM's toy proxy), and the render split
(`vllm launch render` plus `--tokens-only` engines). For benchmarking they carry
`--no-enable-prefix-caching`: a sweep reuses its seed across rates."""

from __future__ import annotations

import json
import math

from advisor.rundata.recommendation import Command, Deployment, DeployPlan, Recommendation

PROXY = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"  # in vLLM's repository
FIRST_PORT, SIDE_CHANNEL_PORT, PROXY_PORT = 8100, 5600, 8192
RENDER_REQ_PER_CORE_S = 73.0  # the guide: one render server, a little over one core


def _serve(model: str, port: int, *extra: str) -> list[str]:
    return ["vllm", "serve", model, "--port", str(port), "--no-enable-prefix-caching", *extra]


def _tp(tp: int) -> tuple[str, ...]:
    return ("--tensor-parallel-size", str(tp)) if tp > 1 else ()


def collocated(model: str, gpus: list[int], tp: int = 1) -> DeployPlan:
    """One server, data parallel over `gpus` (the guide's collocated baseline), each rank
    `tp` GPUs wide."""
    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    return DeployPlan("collocated", [Command("collocated", _serve(
        model, 8000, "--data-parallel-size", str(len(gpus) // tp), *_tp(tp)), env)],
        ["one API server; its data-parallel ranks share the requests"])


def disaggregated(model: str, gpus: list[int], prefill: int = 1, decode: int = 1,
                  bidirectional: bool = False, ucx_devices: list[str] | None = None,
                  tp: int = 1) -> DeployPlan:
    """`prefill` + `decode` instances, `tp` GPUs each (from `gpus`), and the toy proxy;
    instance i uses `ucx_devices[i % len]` (its RDMA device) when given."""
    if (prefill + decode) * tp > len(gpus):
        raise ValueError(f"{prefill}P{decode}D needs {(prefill + decode) * tp} GPUs; "
                         f"{len(gpus)} given")
    commands: list[Command] = []
    ports: dict[str, list[int]] = {"prefill": [], "decode": []}
    roles = ["prefill"] * prefill + ["decode"] * decode
    ranks = [",".join(map(str, gpus[i * tp:(i + 1) * tp])) for i in range(len(roles))]
    for i, (role, gpu) in enumerate(zip(roles, ranks, strict=False)):
        kv_role = "kv_both" if bidirectional else (
            "kv_producer" if role == "prefill" else "kv_consumer")
        config = {"kv_connector": "NixlConnector", "kv_role": kv_role}
        env = {"CUDA_VISIBLE_DEVICES": str(gpu),
               "VLLM_NIXL_SIDE_CHANNEL_PORT": str(SIDE_CHANNEL_PORT + i)}
        if ucx_devices:
            env["UCX_NET_DEVICES"] = ucx_devices[i % len(ucx_devices)]
        port = FIRST_PORT + (0 if role == "prefill" else 100) + len(ports[role])
        ports[role].append(port)
        commands.append(Command(role, _serve(model, port, *_tp(tp), "--kv-transfer-config",
                                             json.dumps(config, separators=(",", ":"))), env))
    commands.append(Command("proxy", [
        "python", PROXY, "--port", str(PROXY_PORT),
        "--prefiller-hosts", *["localhost"] * prefill,
        "--prefiller-ports", *map(str, ports["prefill"]),
        "--decoder-hosts", *["localhost"] * decode,
        "--decoder-ports", *map(str, ports["decode"])]))
    notes = [f"clients use http://localhost:{PROXY_PORT} (the proxy)"]
    if not ucx_devices:
        notes.append("UCX_NET_DEVICES: give each instance its RDMA device (advisor deploy "
                     "--ucx-devices mlx5_0:1,mlx5_1:1) when the KV moves between hosts")
    if bidirectional:
        notes.append("kv_both on every instance: the prefiller pulls earlier turns' KV from "
                     "the decoder (bidirectional transfer); clients send a conversation_id")
    return DeployPlan("disaggregated-bidirectional" if bidirectional else "disaggregated",
                commands, notes)


def render_split(model: str, gpus: list[int], frontend_cpu_ms: float | None,
                 peak_rps: float | None, reasoning_parser: str | None = None,
                 tool_call_parser: str | None = None) -> DeployPlan:
    """A render server with enough workers for the measured front-end CPU at `peak_rps`,
    and a `--tokens-only` engine per GPU."""
    workers = 1
    if frontend_cpu_ms and peak_rps:
        workers = max(1, math.ceil(frontend_cpu_ms / 1000 * peak_rps))
    parsers = []
    if reasoning_parser:
        parsers += ["--reasoning-parser", reasoning_parser]
    if tool_call_parser:
        parsers += ["--enable-auto-tool-choice", "--tool-call-parser", tool_call_parser]
    commands = [Command("render", ["vllm", "launch", "render", model, "--port", "8000",
                                   "--renderer-num-workers", str(workers), *parsers])]
    for i, gpu in enumerate(gpus):
        commands.append(Command("engine", _serve(model, FIRST_PORT + i, "--tokens-only",
                                                 *parsers),
                                {"CUDA_VISIBLE_DEVICES": str(gpu)}))
    why = (f"{workers} render worker(s): {frontend_cpu_ms:.1f} ms of front-end CPU per request "
           f"at {peak_rps:g} req/s" if frontend_cpu_ms and peak_rps else
           "1 render worker: no front-end CPU was measured")
    return DeployPlan("render-split", commands,
                      [why, "the same model, tokenizer and parser flags on render and engines, "
                            "or outputs diverge"])


# presets that mimic a published model: the name vLLM loads it by
HF_NAMES = {"qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
            "qwen3-0.6b": "Qwen/Qwen3-0.6B", "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
            "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
            "deepseek-v3": "deepseek-ai/DeepSeek-V3",
            "qwen3-next-80b-a3b": "Qwen/Qwen3-Next-80B-A3B-Instruct"}
ACTION_PLAN = {"disaggregate": "disaggregated",
               "disaggregate-bidirectional": "disaggregated-bidirectional",
               "stay-collocated": "collocated", "split-render-tier": "render-split"}


def section(rec: Recommendation, collocated_name: str | None, disagg_name: str | None,
            model: str | None, gpus: list[int] | None = None,
            frontend_cpu_ms: float | None = None, peak_rps: float | None = None,
            ucx_devices: list[str] | None = None, tp: int = 1) -> Deployment:
    """The `deploy` section of a recommendation: the commands for every placement the sweep
    measured (shaped as measured: `collocated-N`, `disagg-XpYd`), the recommended one named
    (None when the advice is not a placement, e.g. measure-first)."""
    prefill, decode = _shape(disagg_name)
    replicas = _replicas(collocated_name)
    gpus = gpus or list(range(max(replicas or 0, prefill + decode) * tp))
    name, notes = _model_name(model)
    plans = [collocated(name, gpus, tp)] if collocated_name else []
    action = rec.action
    if disagg_name:
        plans.append(disaggregated(name, gpus, prefill, decode,
                                   bidirectional=action == "disaggregate-bidirectional",
                                   ucx_devices=ucx_devices, tp=tp))
    if "split-render-tier" in (action, *rec.secondary_actions):
        plans.append(render_split(name, gpus, frontend_cpu_ms, peak_rps))
    return Deployment(name, gpus, ACTION_PLAN.get(action), plans, notes)


def _model_name(model: str | None) -> tuple[str, list[str]]:
    if model in HF_NAMES:
        return HF_NAMES[model], []
    if not model or model in ("tiny", "small"):
        return "MODEL", [f"the bundled preset {model or 'of the sweep'!r} is no published "
                         "model: put yours in place of MODEL (or pass --model)"]
    return model, []


def _shape(name: str | None) -> tuple[int, int]:
    """disagg-XpYd -> (X, Y); (1, 1) for a deployment whose shape the sweep did not set."""
    shape = (name or "").removeprefix("disagg-")
    p, _, d = shape.removesuffix("d").partition("p")
    return (int(p), int(d)) if p.isdigit() and d.isdigit() else (1, 1)


def _replicas(name: str | None) -> int | None:
    n = (name or "").removeprefix("collocated-")
    return int(n) if n.isdigit() else None


def as_shell(deploy: Deployment) -> str:
    """A shell script per plan: every process but the last in the background."""
    lines = [f"# {deploy.model} on GPUs {','.join(map(str, deploy.gpus))}"]
    lines += [f"# NOTE: {n}" for n in deploy.notes]
    for plan in deploy.plans:
        mark = " (recommended)" if plan.placement == deploy.recommended else ""
        lines += ["", f"# --- {plan.placement}{mark}"]
        lines += [f"# {n}" for n in plan.notes]
        shell = plan.shell
        lines += [c + " &" for c in shell[:-1]] + shell[-1:]
    return "\n".join(lines) + "\n"


def from_evidence(rec: Recommendation, ev, model: str | None, gpus: list[int] | None = None,
                  ucx_devices: list[str] | None = None, tp: int = 1) -> Deployment:
    """`section` for a sweep's evidence (advisor.rundata.evidence.Evidence)."""
    dis = ev.disaggregated
    peak = max([s.max_goodput_rps or 0.0 for s in (ev.collocated, dis) if s] or [0.0])
    return section(rec, ev.collocated.placement if ev.collocated else None,
                   dis.placement if dis else None, model, gpus,
                   ev.frontend.cpu_ms_per_request if ev.frontend else None, peak or None,
                   ucx_devices, tp)
