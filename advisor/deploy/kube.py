"""A deployment on Kubernetes, from the same commands the shell form runs: plain manifests
(`--format k8s`: a Deployment and a Service per tier, and the front), each vLLM pod as
advisor.deploy.pods dresses it (vendor's GPUs, one pinned image, /dev/shm, probes, the KV
network, affinity). llm-d's form is advisor.deploy.llmd."""

from __future__ import annotations

from typing import Any

import yaml

from advisor.deploy.pods import DEFAULT_CLUSTER, Cluster, engine_pod
from advisor.deploy.shell import comment
from advisor.rundata.recommendation import Command, DeployCommands, DeployPlan

PART_OF = "advisor"
SIDE_PORT = 5600  # NIXL's side channel in every pod (one instance per pod)
POD_IP = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


class _Dumper(yaml.SafeDumper):
    """Every value written where it is used: no &anchors and *aliases for people to chase."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def yaml_docs(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False)


def chosen(deploy: DeployCommands) -> DeployPlan:
    """The plan a manifest deploys: the recommended one, else the measured P/D, else the
    first (the advice named none: measure-first)."""
    by = {p.placement: p for p in deploy.plans}
    return by.get(deploy.recommended or "") or next(
        (p for p in deploy.plans if p.placement.startswith("disaggregated")), deploy.plans[0])


def flag_value(argv: list[str], flag: str, default: str | None = None) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else default


def without_flags(argv: list[str], *flags: str) -> list[str]:
    """`argv` without each of `flags` and the value after it."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        else:
            out.append(a)
    return out


def pod_env(c: Command, p2p: bool) -> list[dict[str, Any]]:
    """The command's environment but what the pod decides (its GPUs, its own address)."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in c.env.items()
           if k not in ("CUDA_VISIBLE_DEVICES", "VLLM_NIXL_SIDE_CHANNEL_HOST",
                        "VLLM_NIXL_SIDE_CHANNEL_PORT")]
    if p2p:
        env += [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", **POD_IP},
                {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(SIDE_PORT)}]
    return env


def labels_of(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": PART_OF}


def _tier(name: str, image: str, c: Command, argv: list[str], replicas: int, gpus: int,
          cluster: Cluster | None = None, hosts: list[str] | None = None,
          pair_with: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A Deployment of `replicas` pods running `argv` (c's, adjusted) and its Service; a
    vLLM pod (`cluster` given) dressed as advisor.deploy.pods says."""
    port = int(flag_value(argv, "--port") or 8000)
    p2p = "--kv-transfer-config" in argv
    ports = [{"containerPort": port, "name": "http"}]
    if p2p:
        ports.append({"containerPort": SIDE_PORT, "name": "nixl"})
    container = {"name": name.rsplit("-", 1)[-1], "image": image, "command": argv[:2],
                 "args": argv[2:], "env": pod_env(c, p2p), "ports": ports}
    if cluster is None:
        pod = {"containers": [{**container, "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"}}}]}
    else:
        pod = engine_pod(container, cluster, gpus, p2p, hosts or [], pair_with)
    labels = labels_of(name)
    return [{"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": name, "labels": labels},
             "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                      "template": {"metadata": {"labels": labels}, "spec": pod}}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
             "spec": {"selector": labels,
                      "ports": [{"name": "http", "port": port, "targetPort": "http"}]}}]


def as_k8s(deploy: DeployCommands, cluster: Cluster = DEFAULT_CLUSTER,
           front_image: str = "advisor") -> str:
    """Multi-document YAML for the chosen plan: each tier a Deployment (replicas: its
    instances) and a Service, P/D pods with NIXL's side channel on their pod IP, and the
    front (advisor proxy, or the render front) in `front_image`, this project installed."""
    plan = chosen(deploy)
    base = f"{PART_OF}-{plan.placement}"
    docs: list[dict[str, Any]] = []
    urls: dict[str, str] = {}
    for role in ("collocated", "prefill", "decode", "render", "engine"):
        cmds = [c for c in plan.commands if c.role == role]
        if not cmds:
            continue
        argv = list(cmds[0].argv)
        replicas = len(cmds)
        if role == "collocated":  # a data-parallel rank per pod
            replicas = int(flag_value(argv, "--data-parallel-size") or 1) * len(cmds)
            argv = without_flags(argv, "--data-parallel-size")
        engine = argv[:2] == ["vllm", "serve"]
        gpus = int(flag_value(argv, "--tensor-parallel-size") or 1) if engine else 0
        hosts = [c.host for c in cmds if c.host]
        pair = labels_of(f"{base}-prefill") if role == "decode" and not hosts else None
        docs += _tier(f"{base}-{role}", cluster.image, cmds[0], argv, replicas, gpus,
                      cluster if engine else None, hosts, pair)
        urls[role] = f"http://{base}-{role}:{flag_value(argv, '--port')}"
    front = _front(plan, urls)
    if front:
        docs += _tier(f"{base}-front", front_image, Command("front", front), front, 1, 0)
    head = [comment(f"advisor deploy --format k8s: {plan.placement} of {deploy.model}")]
    head += [comment(n) for n in header_notes(deploy, cluster)]
    head += [comment(n) for n in _k8s_notes(plan)]
    return "\n".join(head) + "\n" + yaml_docs(docs)


def _front(plan: DeployPlan, urls: dict[str, str]) -> list[str] | None:
    """The front's argv against the tiers' Services (advisor proxy in place of vLLM's
    scripts, which its image lacks), on every address."""
    port = next((flag_value(c.argv, "--port") for c in plan.commands if c.role in
                 ("proxy", "front")), None)
    if "prefill" in urls:
        return ["advisor", "proxy", "--prefill", urls["prefill"], "--decode", urls["decode"],
                "--host", "0.0.0.0", "--port", str(port)] + (
            ["--bidirectional"] if plan.placement.endswith("bidirectional") else [])
    if "render" in urls:
        return ["python", "-m", "engine.fronts.render_front", "--render", urls["render"],
                "--engine", urls["engine"], "--host", "0.0.0.0", "--port", str(port)]
    return None


def header_notes(deploy: DeployCommands, cluster: Cluster) -> list[str]:
    """Where the advice was measured (and that it was elsewhere, where it was), and what the
    pods assume of the cluster."""
    out = [n for n in deploy.notes if n.startswith("MEASURED ELSEWHERE")]
    if deploy.measured_on and not deploy.elsewhere:
        out.append(f"evidence from {deploy.measured_on}")
    out.append(f"image {cluster.image} on every tier (NIXL's handshake wants one vLLM on "
               "both sides of a transfer)")
    net = {"rdma": f"P/D pods move KV over RDMA: one {cluster.rdma_resource} each (your RDMA "
                   "device plugin's resource: --rdma-resource)",
           "host": "P/D pods use their node's network (hostNetwork) for KV",
           "pod": "P/D pods move KV over the pod network (TCP): the guide's slow-transfer "
                  "case; give --kv-network rdma or host where the nodes have RDMA"}
    out.append(net[cluster.kv_network])
    return out


def _k8s_notes(plan: DeployPlan) -> list[str]:
    notes = [n for n in plan.notes if "http://" not in n and "checkout" not in n]
    if plan.placement.startswith("disaggregated"):
        notes.append("the front is advisor proxy (vLLM's proxies are scripts in its source "
                     "tree, not in its image); --front-image names an image with this "
                     "project installed")
    return notes
