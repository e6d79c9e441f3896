"""The vLLM commands that run a placement, as vLLM's docs wire them: collocated (one
`vllm serve` with data parallelism over a host's GPUs), disaggregated (a `vllm serve` per
prefiller and decoder with a NixlConnector `--kv-transfer-config`, each with its own
side-channel port, GPUs and UCX device, behind a P/D proxy), and the render split
(`vllm launch render` servers, `--tokens-only` engines, and a front that does render ->
generate -> derender). Prefix caching stays at vLLM's default (on), as an operator runs
it: what a sweep's prompts share is the workload's to say."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from advisor.rundata.bounds import MAX_RENDER_SERVERS
from advisor.rundata.recommendation import Command, DeployPlan

# NOTE: both are scripts in vLLM's repository, not installed by pip: run from a checkout
TOY_PROXY = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
MULTITURN_PROXY = "examples/disaggregated/disaggregated_serving/disagg_proxy_multiturn.py"
PROXY_OFFSET, PREFILL_OFFSET, DECODE_OFFSET, RENDER_OFFSET = 192, 100, 200, 300
CHECKOUT = ("vLLM's proxy scripts live in its source tree, not in the pip package: run them "
            "from a checkout (git clone https://github.com/vllm-project/vllm), or use "
            "advisor proxy (deploy --proxy advisor)")


@dataclass(frozen=True)
class Site:
    """Where the instances go: `hosts` in turn (None: one host, unnamed), serving ports from
    `base_port` (collocated there, prefillers +100, decoders +200, render servers +300, the
    proxy +192, vLLM's example layout at 8000), NIXL side channels from `side_port`, and
    each P/D instance's RDMA device from `ucx_devices` in turn."""

    hosts: tuple[str, ...] = ()
    base_port: int = 8000
    side_port: int = 5600
    ucx_devices: tuple[str, ...] = ()

    def host(self, i: int) -> str | None:
        return self.hosts[i % len(self.hosts)] if self.hosts else None

    def address(self, host: str | None) -> str:
        return host or "localhost"


@dataclass(frozen=True)
class Runtime:
    """How each instance starts and where it runs: the server's argv before the model
    (`vllm serve`; where that console script does not run, the module), flags every instance
    takes, the environment every instance shares, and its share of the host: GPUs
    (CUDA_VISIBLE_DEVICES) or, for vLLM's CPU build, cores (VLLM_CPU_OMP_THREADS_BIND), whose
    KV moves through host memory."""

    server: tuple[str, ...] = ("vllm", "serve")
    flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cpu: bool = False
    render: tuple[str, ...] = ("vllm", "launch", "render")  # a render server, up to the model

    def placed(self, units: list[int]) -> dict[str, str]:
        """The environment of an instance on `units` (GPU indices, or cores on a CPU)."""
        key = "VLLM_CPU_OMP_THREADS_BIND" if self.cpu else "CUDA_VISIBLE_DEVICES"
        return {key: ",".join(map(str, units)), **dict(self.env)}

    def serve(self, model: str, port: int, *extra: str) -> list[str]:
        return [*self.server, model, "--port", str(port), *self.flags, *extra]

    def render_server(self, model: str, port: int, *extra: str) -> list[str]:
        return [*self.render, model, "--port", str(port), *self.flags, *extra]


GPU = Runtime()


def _tp(tp: int) -> tuple[str, ...]:
    return ("--tensor-parallel-size", str(tp)) if tp > 1 else ()


def _on_hosts(site: Site, n: int) -> list[tuple[str | None, int]]:
    """Each of `n` instances' host and its index among that host's instances."""
    seen: dict[str | None, int] = {}
    out = []
    for i in range(n):
        host = site.host(i)
        out.append((host, seen.get(host, 0)))
        seen[host] = seen.get(host, 0) + 1
    return out


def collocated(model: str, gpus: list[int], tp: int = 1, site: Site = Site(),
               runtime: Runtime = GPU) -> DeployPlan:
    """One server per host, data parallel over `gpus` (the guide's collocated baseline),
    each rank `tp` units wide; several hosts get a round-robin front (advisor proxy). On
    CPU cores, one server per `tp` cores behind that front (vLLM's CPU build runs no data
    parallelism)."""
    if runtime.cpu:
        return replicas_behind_front(model, [gpus[i:i + tp] for i in range(0, len(gpus), tp)],
                                     site, runtime)
    hosts: list[str | None] = list(site.hosts) or [None]
    commands = [Command("collocated", runtime.serve(
        model, site.base_port, "--data-parallel-size", str(len(gpus) // tp), *_tp(tp)),
        runtime.placed(gpus), host) for host in hosts]
    notes = ["one API server per host; its data-parallel ranks share the requests"]
    if len(hosts) > 1:
        commands.append(_round_robin([f"http://{h}:{site.base_port}" for h in hosts],
                                     site.base_port + PROXY_OFFSET, hosts[0]))
        notes.append(f"clients use http://{hosts[0]}:{site.base_port + PROXY_OFFSET} (a "
                     "round-robin front over the hosts' servers)")
    return DeployPlan("collocated", commands, notes)


def replicas_behind_front(model: str, groups: list[list[int]], site: Site,
                          runtime: Runtime) -> DeployPlan:
    """A server on each group of one host's units, and advisor proxy's round-robin front: on
    cores, each server's threads bound to its group (the CPU build's parallelism within an
    instance); on GPUs, each group one tensor-parallel instance (an MoE's replicas, which
    vLLM's data parallelism would join into one expert-parallel group)."""
    host = site.host(0)
    ports = [site.base_port + k for k in range(len(groups))]
    commands = [Command("collocated", runtime.serve(
        model, port, *(() if runtime.cpu else _tp(len(group)))), runtime.placed(group), host)
        for port, group in zip(ports, groups)]
    front = site.base_port + PROXY_OFFSET
    commands.append(_round_robin([f"http://{site.address(host)}:{p}" for p in ports], front,
                                 host))
    return DeployPlan("collocated", commands, [
        f"clients use http://{site.address(host)}:{front} (a round-robin front over "
        f"{len(groups)} server(s), one per {'core' if runtime.cpu else 'GPU'} group)"])


def _round_robin(urls: list[str], port: int, host: str | None) -> Command:
    """advisor proxy as a round-robin front over collocated servers at `urls`."""
    return Command("proxy", ["advisor", "proxy", "--decode", ",".join(urls), "--port",
                             str(port)], {}, host)


def kv_config(role: str, bidirectional: bool, cpu: bool = False) -> dict[str, Any]:
    """The NixlConnector config of a prefill or decode instance: explicit roles (vLLM
    deprecates kv_both for NixlConnector), the KV buffer in host memory on a CPU build, and,
    for multi-turn reuse, bidirectional_kv_xfer on both
    (docs/features/nixl_connector_usage.md)."""
    cfg: dict[str, Any] = {"kv_connector": "NixlConnector",
                 "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
                 "kv_load_failure_policy": "fail"}
    if cpu:
        cfg["kv_buffer_device"] = "cpu"
    if bidirectional:
        cfg["kv_connector_extra_config"] = {"bidirectional_kv_xfer": True}
    return cfg


def disaggregated(model: str, groups: list[list[int]], prefill: int, decode: int,
                  bidirectional: bool = False, site: Site = Site(), proxy: str = "vllm",
                  runtime: Runtime = GPU) -> DeployPlan:
    """`prefill` + `decode` instances, instance i on `groups[i]` (its GPUs on its host: its
    tensor-parallel size), and the proxy: vLLM's (the toy proxy; the multi-turn one for
    bidirectional transfer) or the project's (`advisor proxy`)."""
    roles = ["prefill"] * prefill + ["decode"] * decode
    commands: list[Command] = []
    where: dict[str, list[tuple[str, int]]] = {"prefill": [], "decode": []}
    counts: dict[tuple[str, str | None], int] = {}
    for i, (role, (host, k)) in enumerate(zip(roles, _on_hosts(site, len(roles)))):
        before = counts.get((role, host), 0)
        counts[(role, host)] = before + 1
        port = site.base_port + (PREFILL_OFFSET if role == "prefill" else DECODE_OFFSET) + before
        env = {**runtime.placed(groups[i]),
               "VLLM_NIXL_SIDE_CHANNEL_PORT": str(site.side_port + k)}
        if host:
            env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = host
        if site.ucx_devices:
            env["UCX_NET_DEVICES"] = site.ucx_devices[i % len(site.ucx_devices)]
        config = json.dumps(kv_config(role, bidirectional, runtime.cpu), separators=(",", ":"))
        commands.append(Command(role, runtime.serve(model, port, *_tp(len(groups[i])),
                                                    "--kv-transfer-config", config), env, host))
        where[role].append((site.address(host), port))
    proxy_port = site.base_port + PROXY_OFFSET
    commands.append(_proxy(proxy, where, bidirectional, proxy_port, site.host(0)))
    notes = [f"clients use http://{site.address(site.host(0))}:{proxy_port} (the proxy)"]
    if proxy == "vllm":
        notes.append(CHECKOUT)
    else:
        notes.append("advisor proxy binds 127.0.0.1: add --host 0.0.0.0 for other machines")
    if not site.ucx_devices and not runtime.cpu:
        notes.append("UCX_NET_DEVICES: give each instance its RDMA device (advisor deploy "
                     "--ucx-devices mlx5_0:1,mlx5_1:1) when the KV moves between hosts")
    if bidirectional:
        notes += ["bidirectional_kv_xfer on every instance: the next turn's prefiller pulls "
                  "the earlier turns' KV (reply included) back from the decoder; clients "
                  "send a conversation_id (or X-Conversation-Id to advisor proxy)",
                  "vLLM reuses the decoder's blocks by position: a reasoning model whose "
                  "chat template drops earlier thinking answers wrongly there, silently "
                  "(vLLM #43094); advisor sweep's multi-turn runs report the share of a "
                  "turn the template keeps"]
    return DeployPlan("disaggregated-bidirectional" if bidirectional else "disaggregated",
                      commands, notes)


def _proxy(kind: str, where: dict[str, Any], bidirectional: bool, port: int,
           host: str | None) -> Command:
    """The P/D front: vLLM's toy proxy, its multi-turn proxy (bidirectional: it keeps each
    conversation's decoder blocks for its next turn), or advisor proxy."""
    if kind == "advisor":
        urls = {r: ",".join(f"http://{h}:{p}" for h, p in where[r]) for r in where}
        argv = ["advisor", "proxy", "--prefill", urls["prefill"], "--decode", urls["decode"],
                "--port", str(port)] + (["--bidirectional"] if bidirectional else [])
        return Command("proxy", argv, {}, host)
    argv = ["python", MULTITURN_PROXY if bidirectional else TOY_PROXY, "--port", str(port)]
    for flag, role in (("prefiller", "prefill"), ("decoder", "decode")):
        argv += [f"--{flag}-hosts", *(h for h, _ in where[role])]
        argv += [f"--{flag}-ports", *(str(p) for _, p in where[role])]
    return Command("proxy", argv, {}, host)


def render_split(model: str, groups: list[list[int]], frontend_cpu_ms: float | None,
                 peak_rps: float | None, parsers: tuple[str, ...] = (),
                 site: Site = Site(), tp: int = 1, runtime: Runtime = GPU) -> DeployPlan:
    """Render servers enough for the measured front-end CPU at `peak_rps` (about one core
    each), a `--tokens-only` engine on each GPU group, and the render front that takes a
    chat request through render -> generate -> derender (vLLM leaves that to its caller:
    docs/serving/online_serving/renderer.md)."""
    workers = 1
    if frontend_cpu_ms and peak_rps:
        workers = max(1, min(MAX_RENDER_SERVERS, math.ceil(frontend_cpu_ms / 1000 * peak_rps)))
    host = site.host(0)
    renders = [site.base_port + RENDER_OFFSET + k for k in range(workers)]
    commands = [Command("render", runtime.render_server(model, p, *parsers), {}, host)
                for p in renders]
    engines = []
    for i, (h, k) in enumerate(_on_hosts(site, len(groups))):
        port = site.base_port + PREFILL_OFFSET + k
        engines.append(f"http://{site.address(h)}:{port}")
        commands.append(Command("engine", runtime.serve(model, port, "--tokens-only", *_tp(tp)),
                                runtime.placed(groups[i]), h))
    front = ["python", "-m", "engine.fronts.render_front", "--port", str(site.base_port),
             "--render", *(f"http://{site.address(host)}:{p}" for p in renders),
             "--engine", *engines]
    commands.append(Command("front", front, {}, host))
    why = (f"{workers} render server(s): {frontend_cpu_ms:.1f} ms of front-end CPU per request "
           f"at {peak_rps:g} req/s, about a core each"
           + (f" (at most {MAX_RENDER_SERVERS}: more is a render tier of its own hosts)"
              if workers == MAX_RENDER_SERVERS else "")
           if frontend_cpu_ms and peak_rps else "1 render server: no front-end CPU was measured")
    return DeployPlan("render-split", commands, [
        why, f"clients use http://{site.address(host)}:{site.base_port} (the render front, "
        "from this project: pip install it; it binds 127.0.0.1, add --host 0.0.0.0 for "
        "other machines)",
        "the same model, tokenizer, chat template and parser flags on every render server, "
        "or outputs diverge; --tokens-only engines load no tokenizer and need none"])
