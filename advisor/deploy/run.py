"""`advisor deploy`: a finished sweep's or plan's advice as the commands (or manifests) that
run it, with the machines the operator names."""

from __future__ import annotations

import json
from dataclasses import dataclass

from advisor.deploy import kube, llmd
from advisor.deploy.advice import Where, from_evidence
from advisor.deploy.origin import origin
from advisor.deploy.pods import KV_NETWORKS, TESTED_VLLM, VENDORS, Cluster
from advisor.deploy.shell import as_shell
from advisor.deploy.vllm import Site
from advisor.errors import UsageError
from advisor.flags import option
from advisor.probe import p2p
from advisor.rundata.files import RunDataError
from advisor.rundata.manifest import Manifest
from advisor.rundata.model_name import checked_model
from advisor.rundata.recommendation import DeployCommands
from advisor.rundata.rundir import MANIFEST, RunDir

FORMATS = ("sh", "json", "k8s", "llm-d")


def _choice(flag: str, text: str | None, allowed: tuple[str, ...]) -> str | None:
    if text is not None and text not in allowed:
        raise UsageError(f"{flag} must be one of {', '.join(allowed)}, not {text!r}")
    return text


@dataclass(frozen=True)
class DeployOptions:
    """`advisor deploy`'s options, each with its flag (advisor.flags)."""

    format: str = option("sh", "sh, json, k8s (Deployments and Services) or llm-d (values "
                               "for llm-d's model-service chart)", "--format")
    model: str | None = option(None, "the model vLLM serves (default: the sweep's)")
    gpus: str | None = option(None, "GPU indices on each host, e.g. 0,1 (default: 0..N-1, or "
                                    "every GPU of the P2P matrix)")
    hosts: str | None = option(None, "h1,h2,...: instances on these hosts in turn, each "
                                     "with its NIXL side-channel host; the proxy on the first")
    p2p_matrix: str | None = option(None, "a saved `nvidia-smi topo -p2p r` (or topo -m) of "
                                          "the GPUs' host (default: the run's own, if any)")
    proxy: str = option("vllm", "the P/D front: vllm (its example proxies) or advisor "
                                "(advisor proxy)")
    ucx_devices: str | None = option(None, "RDMA devices, one per P/D instance in turn, e.g. "
                                           "mlx5_0:1,mlx5_1:1 (UCX_NET_DEVICES)")
    base_port: int = option(8000, "serving ports from here: collocated +0, prefill +100, "
                                  "decode +200, render +300, proxy +192", min=1, max=65000)
    side_channel_port: int = option(5600, "NIXL side-channel ports from here, one per "
                                          "instance on a host", min=1, max=65000)
    # None: vLLM's own image for the GPU vendor, at the vLLM measured or planned
    image: str | None = option(None, "k8s and llm-d: the vLLM image (default: vLLM's for the "
                                     "GPU vendor, pinned to the vLLM the advice was measured or "
                                     f"planned with, else {TESTED_VLLM})")
    gpu_vendor: str | None = option(None, "k8s and llm-d: nvidia or amd (default: the plan's "
                                          "GPU's, else nvidia)",
                                    parse=lambda t: _choice("--gpu-vendor", t, tuple(VENDORS)))
    kv_network: str = option("rdma", "k8s and llm-d: how P/D pods move KV: rdma (an RDMA "
                                     "device each: --rdma-resource), host (the node's network) "
                                     "or pod (TCP over the pod network: slow)",
                             parse=lambda t: _choice("--kv-network", t, KV_NETWORKS) or "rdma")
    rdma_resource: str = option("rdma/ib", "k8s and llm-d: the RDMA device resource a P/D pod "
                                           "asks for, one each (your device plugin's name)")
    front_image: str = option("advisor", "k8s: an image with this project installed, for "
                                         "the front (advisor proxy or the render front)")


def _list(flag: str, text: str | None) -> tuple[str, ...]:
    items = tuple(x.strip() for x in (text or "").split(",") if x.strip())
    if text is not None and not items:
        raise UsageError(f"{flag} {text!r}: expected a comma-separated list")
    return items


def where(opts: DeployOptions, tp: int) -> Where:
    """The machines the options name; UsageError naming the bad flag."""
    if opts.format not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, not {opts.format!r}")
    if opts.proxy not in ("vllm", "advisor"):
        raise UsageError(f"--proxy must be vllm or advisor, not {opts.proxy!r}")
    try:
        gpus = tuple(int(g) for g in _list("--gpus", opts.gpus)) or None
    except ValueError:
        raise UsageError(f"--gpus {opts.gpus!r}: expected GPU indices such as 0,1") from None
    if gpus and (min(gpus) < 0 or len(set(gpus)) != len(gpus)):
        raise UsageError(f"--gpus {opts.gpus!r}: each GPU index once, none negative")
    matrix = p2p.read(opts.p2p_matrix)[0] if opts.p2p_matrix else None
    site = Site(_list("--hosts", opts.hosts), opts.base_port, opts.side_channel_port,
                _list("--ucx-devices", opts.ucx_devices))
    return Where(gpus, site, matrix, opts.proxy, tp)


def run_deploy(source: str, opts: DeployOptions) -> DeployCommands:
    """Print the commands for a finished run's placements (the recommended one marked) in
    the format asked; UsageError naming the bad flag."""
    run_dir = RunDir.existing(source)
    ev, rec = run_dir.read_evidence(), run_dir.read_recommendation()
    # a plan's placements may need tensor parallelism (its manifest says how much)
    manifest = run_dir.read_manifest()
    plan = manifest.plan
    w = where(opts, plan.candidates[0].tp if plan and plan.candidates else 1)
    model = checked_model(opts.model, "--model") if opts.model else \
        checked_model(manifest.model, f"{run_dir.path / MANIFEST}: config.model") \
        if manifest.model else None
    try:
        out = from_evidence(rec, ev, model, w, origin(manifest),
                            str(run_dir.path))
    except ValueError as e:
        raise UsageError(f"--gpus: {e}") from None
    vendor = opts.gpu_vendor or (plan.gpu.vendor if plan else "nvidia")
    if vendor not in VENDORS:
        raise RunDataError(f"{run_dir.path / MANIFEST}: plan.gpu.vendor {vendor[:40]!r} is "
                           f"none of {', '.join(VENDORS)}")
    cluster = Cluster(vendor,
                      _vllm_version(manifest), opts.image, opts.kv_network, opts.rdma_resource)
    if opts.format == "json":
        text = json.dumps(out.to_json(), indent=2) + "\n"
    elif opts.format == "k8s":
        text = kube.as_k8s(out, cluster, opts.front_image)
    elif opts.format == "llm-d":
        try:
            text = llmd.as_llmd(out, cluster, llmd.threshold(ev))
        except ValueError as e:
            raise UsageError(f"--format llm-d: {e}") from None
    else:
        text = as_shell(out)
    print(text, end="")
    return out


def _vllm_version(m: Manifest) -> str:
    """The vLLM the advice was measured with (a sweep on vLLM), or planned with (the plan's
    kernel tables'); else the one this project tests against."""
    if m.engine is not None and m.engine.name == "vllm":
        return m.engine.version
    return (m.plan.vllm if m.plan else None) or TESTED_VLLM
