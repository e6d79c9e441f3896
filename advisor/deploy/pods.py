"""What every vLLM pod of a deployment carries, as vLLM's and llm-d's Kubernetes guides run
them (llm-d/llm-d guides/pd-disaggregation/modelserver/gpu/vllm/base/patch-decode.yaml,
and its amd/ twin): the GPUs as the vendor's resource, an image pinned to one vLLM on every
tier, `/dev/shm` in memory, startup, liveness and readiness probes on `/health`, and for a
P/D pod the network its KV moves over (an RDMA device, the node's network, or the pod
network) and affinity that keeps a placement's instances on its nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the vLLM this project tests against (.ci/vllm pins its CPU build): the image for
# advice no vLLM was measured or planned with
TESTED_VLLM = "0.32.0"
VENDORS = {"nvidia": ("nvidia.com/gpu", "vllm/vllm-openai"),
           "amd": ("amd.com/gpu", "vllm/vllm-openai-rocm")}
KV_NETWORKS = ("rdma", "host", "pod")
SHM = "16Gi"  # llm-d's guides give vLLM pods 16-20 GiB of /dev/shm (NCCL, NIXL's staging)
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Cluster:
    """The cluster's side: GPU vendor, the vLLM version every pod runs, the image (None:
    vLLM's own for the vendor at that version), and how P/D pods move KV: rdma (one
    `rdma_resource` device each, memory locked for it), host (the node's network), pod
    (the pod network: TCP, the guide's slow-transfer case)."""

    vendor: str = "nvidia"
    vllm: str = TESTED_VLLM
    image_override: str | None = None
    kv_network: str = "rdma"
    rdma_resource: str = "rdma/ib"

    @property
    def image(self) -> str:
        return self.image_override or f"{VENDORS[self.vendor][1]}:v{self.vllm}"

    @property
    def gpu_resource(self) -> str:
        return VENDORS[self.vendor][0]


DEFAULT_CLUSTER = Cluster()


def probes(port: str) -> dict[str, Any]:
    """Startup (up to an hour: large models load slowly), liveness and readiness on /health
    of the named container port, at llm-d's guide's periods."""
    timing = {"startupProbe": (15, 30, 5, 120), "livenessProbe": (0, 10, 5, 3),
              "readinessProbe": (0, 5, 2, 3)}
    return {name: {"httpGet": {"path": "/health", "port": port},
                   **({"initialDelaySeconds": delay} if delay else {}),
                   "periodSeconds": period, "timeoutSeconds": timeout,
                   "failureThreshold": failures}
            for name, (delay, period, timeout, failures) in timing.items()}


def engine_pod(container: dict[str, Any], cluster: Cluster, gpus: int, kv: bool,
               hosts: list[str], pair_with: dict[str, Any] | None,
               port: str = "http") -> dict[str, Any]:
    """The pod spec of a vLLM pod on `gpus` GPUs (`container` dressed in place, its probes
    on the named `port`): `kv` for a P/D instance,
    `hosts` the nodes the placement put its instances on (none named: any), `pair_with`
    the labels of the pods it must share a node with (a decoder with its prefillers, their
    KV over the node's P2P path)."""
    limits: dict[str, Any] = {cluster.gpu_resource: gpus} if gpus else {}
    pod: dict[str, Any] = {}
    if kv and cluster.kv_network == "rdma":
        limits[cluster.rdma_resource] = 1
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    elif kv and cluster.kv_network == "host":
        pod.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    if limits:
        container["resources"] = {"limits": dict(limits), "requests": dict(limits)}
    container["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    container.update(probes(port))
    pod["containers"] = [container]
    pod["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM}}]
    affinity = _affinity(hosts, pair_with)
    if affinity:
        pod["affinity"] = affinity
    return pod


def _affinity(hosts: list[str], pair_with: dict[str, Any] | None) -> dict[str, Any]:
    """Pods on the placement's named nodes; without names, a decoder on its prefillers'."""
    if hosts:
        term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In",
                                      "values": sorted(set(hosts))}]}
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}
    if pair_with:
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": pair_with}, "topologyKey": HOSTNAME}]}}
    return {}
