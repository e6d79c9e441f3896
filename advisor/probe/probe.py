"""`advisor probe`: hardware inventory, the P2P matrix, measured links, and a transfer check.

On a machine without GPUs it says so plainly and goes on with the host checks.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console

from advisor.errors import UsageError
from advisor.measure.prom import read, scrape_text, transfer_of
from advisor.measure.ready import served_model, wait_ready
from advisor.measure.records import Endpoint
from advisor.measure.transfer import HEALTHY_MS, LINK_FLOORS_GBPS, SLOW_MS, verdict
from advisor.measure.urls import DEFAULT_READY_TIMEOUT_S, check_url
from advisor.measure.workload_run import measure
from advisor.output.console import say, show_table
from advisor.probe import hardware, p2p
from advisor.probe.cores import CoreSharing, host_core_sharing
from advisor.probe.options import ProbeOptions
from advisor.probe.wakeup import NOTABLE, Wakeup, probe_wakeup
from engine import api
from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, synthesize


def run_probe(opts: ProbeOptions, out: Console | None = None) -> dict[str, Any]:
    """Collect everything the options ask for; print it as tables or JSON; return it."""
    if opts.link_mb < 1:
        raise UsageError("--link-mb must be >= 1")
    if opts.wakeup_idle_s < 0:
        raise UsageError("--wakeup-idle-s must be >= 0")
    if opts.link not in LINK_FLOORS_GBPS:
        raise UsageError(f"--link-class must be one of {', '.join(LINK_FLOORS_GBPS)}, "
                         f"not {opts.link!r}")
    check_url("--transfer-check", opts.transfer_check)
    for url in opts.metrics_urls:
        check_url("--metrics-url", url)
    result: dict[str, Any] = {"gpus": [], "gpu_note": None, "torch": None, "p2p": None,
                              "p2p_source": None}
    gpus, note = hardware.inventory()
    result.update(gpus=hardware.gpus_json(gpus), gpu_note=note, torch=hardware.torch_view(),
                  cpu=hardware.cpu_view())
    if opts.p2p_matrix or gpus:
        matrix, source = p2p.read(opts.p2p_matrix)
        result["p2p"], result["p2p_source"] = (matrix.to_json() if matrix else None), source
    result["wakeup"] = probe_wakeup(opts.wakeup_idle_s)
    cores = host_core_sharing()
    result["core_sharing"] = cores.to_json() if cores else None
    result["links"] = api.host_links(opts.link_mb << 20)
    n = result["torch"]["device_count"]
    result["links"]["gpu_pairs"] = api.gpu_links(n) if n > 1 else []
    if opts.transfer_check:
        result["transfer_check"] = transfer_check(
            opts.transfer_check,
            list(opts.metrics_urls),
            opts.check_prompts,
            opts.check_prompt_tokens,
            opts.model,
            opts.ready_timeout,
            opts.link,
        )
    if opts.as_json:
        print(json.dumps(result, indent=2))
    else:
        _print(result, out or Console())
    return result


def transfer_check(url: str, metrics_urls: list[str], prompts: int, tokens: int,
                   model: str | None = None,
                   ready_timeout: float = DEFAULT_READY_TIMEOUT_S,
                   link: str = "fast") -> dict[str, Any]:
    """Send `prompts` long prompts one at a time; read the decoders' transfer metrics; judge."""
    wait_ready(url, model, None, ready_timeout)
    model = served_model(url, model)
    metrics_urls = metrics_urls or [url.rstrip("/") + "/metrics"]
    try:
        before = read(scrape_text(metrics_urls))
    except (OSError, ValueError) as e:
        raise UsageError(
            f"cannot read transfer metrics from {', '.join(metrics_urls)}: {e}"
        ) from None
    spec = SyntheticSpec(
        input=LengthDist("fixed", tokens),
        output=LengthDist("fixed", 4),
        arrivals=Arrivals("poisson", math.inf),
        num_prompts=prompts,
    )
    run = measure(
        Endpoint(url, model, ignore_eos=True),
        synthesize(spec, 0),
        max_concurrency=1,
        label="transfer check",
    )
    delta = transfer_of(read(scrape_text(metrics_urls)).minus(before))
    out = {**verdict(delta, link), "failed_requests": sum(not r.ok for r in run.records),
           "thresholds_ms": {"healthy_below": HEALTHY_MS, "slow_from": SLOW_MS}}
    if delta.count <= 0:
        out["detail"] = ("the metrics show no KV transfer: is this a disaggregated deployment, "
                         "and are these its decoders' /metrics?")
    return out


def _print(r: dict[str, Any], out: Console) -> None:
    cpu = r["cpu"]
    say(out, f"[bold]CPU:[/] {cpu['model']}; vector units: "
             f"{', '.join(cpu['vector_flags']) or 'none of ' + ', '.join(hardware.VECTOR_FLAGS)}")
    say(out, "  matmul on one thread: " + ", ".join(
        f"{d} {g:.0f} GFLOP/s" for d, g in cpu["matmul_gflops"].items()))
    say(out, f"  dtype auto -> {cpu['auto_dtype']} ({cpu['auto_reason']})")
    if r["wakeup"]:
        w = Wakeup(r["wakeup"]["idle_s"], r["wakeup"]["busy_ms"], r["wakeup"]["after_idle_ms"])
        say(out, f"  after idle: {w.summary()}"
                 + ("; latencies at low request rates include this" if w.ratio >= NOTABLE
                    else ""))
    if r["core_sharing"]:
        c = r["core_sharing"]
        say(out, "  cores: " + CoreSharing(c["core"], c["other"], c["alone_gflops"],
                                            c["shared_gflops"]).summary())
    if r["gpus"]:
        show_table(out, "GPUs", ["index", "name", "memory", "PCI bus"],
                   [[str(g["index"]), g["name"], g["memory_total"], g["pci_bus_id"]]
                    for g in r["gpus"]])
    else:
        note = (r["gpu_note"] or "").rstrip(".")
        say(out, f"[bold]GPUs:[/] none{f' ({note})' if note else ''}. Host checks follow.")
    if r["p2p"]:
        m = r["p2p"]
        show_table(out, f"P2P read capability ({r['p2p_source']})", ["", *m["gpus"]],
                   [[g, *row] for g, row in zip(m["gpus"], m["status"])], whole=len(m["gpus"]) + 1)
        say(out, "  " + "; ".join(f"{k} = {v}" for k, v in m["legend"].items()))
    rows = [[name, f"{lk['gbps']:.2f}", f"{lk['ms']:.1f}", f"{lk['bytes'] / 1e6:.0f}"]
            for name, lk in ((n, r["links"][n]) for n in ("shm", "tcp"))]
    for pair in r["links"]["gpu_pairs"]:
        peer = f"{pair['peer_gbps']:.1f}" if pair["peer_gbps"] else "-"
        rows.append([f"GPU{pair['src']}->GPU{pair['dst']} peer / staged",
                     f"{peer} / {pair['staged_gbps']:.1f}", "", ""])
    show_table(out, "measured links (KV-sized payloads, the engine's connectors)",
               ["link", "GB/s", "ms", "MB"], rows, right=True, whole=4)
    tc = r.get("transfer_check")
    if tc:
        say(out, f"[bold]transfer check:[/] {tc['verdict']}")
        if tc.get("mean_ms") is not None:
            say(out, f"  {tc['transfers']:g} transfers, mean {tc['mean_ms']:.1f} ms, "
                     f"{tc['mean_mb']:.1f} MB each, {tc['gbps'] or 0:.2f} GB/s "
                     f"({tc['metrics']} metrics)")
            if tc.get("overhead_ms") is not None:
                say(out, f"  beside the wire: {tc['overhead_ms']:.2f} ms per transfer")
        else:
            say(out, f"  {tc['detail']}")
