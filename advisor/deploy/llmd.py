"""`--format llm-d`: a placement as llm-d's P/D guide deploys it (llm-d/llm-d
guides/pd-disaggregation, README.md and scheduler/pd-disaggregation.values.yaml): the llm-d
Router (the Gateway API Inference Extension's `standalone` chart, GAIE_VERSION, running
llm-d's inference scheduler as its endpoint picker) given values whose EndpointPickerConfig
splits prefill from decode, and the model servers as Deployments labelled for its pool,
each decoder with llm-d's routing sidecar.

The endpoint picker's `prefix-based-pd-decider` sends a request to a prefiller only when
more than `nonCachedTokens` of its prompt are not cached on the decoder; the threshold is
set from the evidence (`threshold`): the longest prompt a decoder's own prefill serves
within the TTFT SLO without stalling its running requests past the ITL SLO, unloaded. No
peer sets it from a measurement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advisor.deploy.kube import (
    SIDE_PORT,
    chosen,
    flag_value,
    header_notes,
    pod_env,
    without_flags,
    yaml_docs,
)
from advisor.deploy.pods import DEFAULT_CLUSTER, Cluster, engine_pod
from advisor.deploy.shell import comment
from advisor.rundata.evidence import Evidence
from advisor.rundata.recommendation import Command, DeployCommands

GAIE_VERSION = "v1.5.0"
ROUTER_CHART = "oci://registry.k8s.io/gateway-api-inference-extension/charts/standalone"
SCHEDULER_IMAGE = ("ghcr.io/llm-d", "llm-d-inference-scheduler", "v0.7.0")
SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.8.0"
# vLLM on 8000 in a prefill pod; in a decode pod on 8200, the routing sidecar on 8000
SERVICE_PORT, DECODE_VLLM_PORT = 8000, 8200
FOLLOWS = (f"llm-d's P/D guide (llm-d/llm-d guides/pd-disaggregation): Gateway API Inference "
           f"Extension charts {GAIE_VERSION}, {SCHEDULER_IMAGE[1]} {SCHEDULER_IMAGE[2]}, "
           f"routing sidecar {SIDECAR_IMAGE.rsplit(':', 1)[1]}")

MAX_THRESHOLD = 1 << 20  # tokens: past any model's context


@dataclass(frozen=True)
class Threshold:
    """The decider's nonCachedTokens, and why that number."""

    tokens: int
    why: str


def threshold(ev: Evidence) -> Threshold:
    """The longest prompt a decoder may prefill itself (the evidence's unloaded prefill line,
    measured or simulated): its prefill meets the TTFT SLO, and it stalls the decoder's
    running requests (one step holding the whole prefill) no longer than the ITL SLO; 0
    (every request to a prefiller) where there is no line, or no prompt passes both."""
    cal, slo = ev.calibration, ev.slo
    if cal is None or cal.prefill_ms_per_token <= 0:
        return Threshold(0, "no unloaded prefill line in the evidence: every request goes "
                            "through a prefiller")
    by_ttft = _tokens((slo.ttft_ms - cal.prefill_base_ms) / cal.prefill_ms_per_token)
    by_itl = _tokens((slo.gap_ms - cal.prefill_base_ms) / cal.prefill_ms_per_token)
    tokens = max(0, min(by_ttft, by_itl))
    line = (f"unloaded prefill {cal.prefill_base_ms:.0f} ms + {cal.prefill_ms_per_token:.3g} "
            f"ms/token on {cal.placement or 'one instance'}, "
            f"{'simulated' if ev.simulated else 'measured'}")
    why = (f"a decoder's own prefill meets TTFT {slo.ttft_ms:g} ms up to {max(by_ttft, 0)} "
           f"tokens and stalls its running requests within ITL {slo.gap_ms:g} ms up to "
           f"{max(by_itl, 0)} ({line})")
    if tokens == 0:
        return Threshold(0, f"{why}: every request goes through a prefiller")
    return Threshold(tokens, f"{why}; longer uncached prompts go to a prefiller")


def _tokens(prompt: float) -> int:
    """A prompt length as a threshold: whole tokens, at most MAX_THRESHOLD (a line of
    almost no cost per token would otherwise give a number of hundreds of digits)."""
    return int(min(max(prompt, -1.0), MAX_THRESHOLD))


def picker_config(pd: bool, tokens: int) -> str:
    """The endpoint picker's EndpointPickerConfig: P/D profiles with the prefix-based
    decider at `tokens`, or one profile over collocated servers."""
    scorers: list[dict[str, Any]] = [{"type": "prefix-cache-scorer"}, {"type": "queue-scorer"},
               {"type": "kv-cache-utilization-scorer"}, {"type": "max-score-picker"}]
    if not pd:
        cfg = {"apiVersion": "inference.networking.x-k8s.io/v1alpha1",
               "kind": "EndpointPickerConfig", "plugins": scorers,
               "schedulingProfiles": [{"name": "default", "plugins": [
                   {"pluginRef": "prefix-cache-scorer", "weight": 3},
                   {"pluginRef": "queue-scorer", "weight": 2},
                   {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                   {"pluginRef": "max-score-picker"}]}]}
        return yaml_docs([cfg])
    plugins: list[dict[str, Any]] = [{"type": "approx-prefix-cache-producer"},
               {"type": "disagg-headers-handler"},
               {"name": "pd-decider", "type": "prefix-based-pd-decider",
                "parameters": {"nonCachedTokens": tokens}},
               {"type": "disagg-profile-handler",
                "parameters": {"deciders": {"prefill": "pd-decider"}}},
               {"type": "prefill-filter"}, {"type": "decode-filter"},
               {"type": "active-request-scorer"}, *scorers]
    cfg = {"apiVersion": "inference.networking.x-k8s.io/v1alpha1",
           "kind": "EndpointPickerConfig", "featureGates": ["prepareDataPlugins"],
           "plugins": plugins,
           "schedulingProfiles": [
               {"name": "prefill", "plugins": [
                   {"pluginRef": "prefill-filter"},
                   {"pluginRef": "prefix-cache-scorer", "weight": 3},
                   {"pluginRef": "queue-scorer", "weight": 2},
                   {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                   {"pluginRef": "max-score-picker"}]},
               {"name": "decode", "plugins": [
                   {"pluginRef": "decode-filter"},
                   {"pluginRef": "active-request-scorer", "weight": 2},
                   {"pluginRef": "prefix-cache-scorer", "weight": 2},
                   {"pluginRef": "max-score-picker"}]}]}
    return yaml_docs([cfg])


def as_llmd(deploy: DeployCommands, cluster: Cluster = DEFAULT_CLUSTER,
            at: Threshold | None = None) -> str:
    """The router's chart values (the first document) and the model servers' Deployments
    (the rest) for the chosen plan; ValueError where it has no vLLM servers."""
    at = at or Threshold(0, "not set from any evidence: every request goes through a prefiller")
    plan = chosen(deploy)
    by_role = {r: [c for c in plan.commands if c.role == r]
               for r in ("collocated", "prefill", "decode", "engine")}
    pd = bool(by_role["prefill"])
    servers = by_role["decode"] or by_role["collocated"] or by_role["engine"]
    if not servers:
        raise ValueError(f"{plan.placement}: no model servers for llm-d's router")
    guide = f"advisor-{plan.placement}"
    pool = {"llm-d.ai/inference-serving": "true", "llm-d.ai/guide": guide}
    values = {
        "inferenceExtension": {
            "replicas": 1,
            "image": dict(zip(("hub", "name", "tag"), SCHEDULER_IMAGE)),
            "pluginsConfigFile": "pd-config.yaml" if pd else "config.yaml",
            "pluginsCustomConfig": {"pd-config.yaml" if pd else "config.yaml":
                                    picker_config(pd, at.tokens)}},
        "inferencePool": {"targetPorts": [{"number": SERVICE_PORT}], "modelServerType": "vllm",
                          "modelServers": {"matchLabels": pool}}}
    docs: list[dict[str, Any]] = [values]
    if pd:
        docs.append(_server(f"{guide}-prefill", "prefill", by_role["prefill"], pool, cluster,
                            SERVICE_PORT))
        docs.append(_server(f"{guide}-decode", "decode", servers, pool, cluster,
                            DECODE_VLLM_PORT, sidecar=True))
    else:
        docs.append(_server(f"{guide}-decode", "both", servers, pool, cluster, SERVICE_PORT))
    head = [comment(f"advisor deploy --format llm-d: {plan.placement} of {deploy.model}, as "
                    f"{FOLLOWS}"),
            comment(f"1. the router: save the first document as router-values.yaml; helm "
                    f"install {guide} {ROUTER_CHART} --version {GAIE_VERSION} -f "
                    "router-values.yaml (after the GAIE CRDs of that version)"),
            comment("2. the model servers: kubectl apply -f the other documents")]
    if pd:
        head.append(comment(f"prefix-based-pd-decider nonCachedTokens {at.tokens}: {at.why}"))
    head += [comment(n) for n in header_notes(deploy, cluster)]
    if plan.placement.endswith("bidirectional"):
        head.append(comment("llm-d's routing sidecar keeps no conversation's decoder blocks "
                            "for its next turn: bidirectional reuse needs a router that does "
                            "(advisor proxy, --format k8s)"))
    if plan.placement == "render-split":
        head.append(comment("llm-d's router has no render tier: the render servers and the "
                            "render front go as in --format k8s"))
    return "\n".join(head) + "\n" + yaml_docs(docs)


def _server(name: str, role: str, cmds: list[Command], pool: dict[str, Any], cluster: Cluster,
            port: int, sidecar: bool = False) -> dict[str, Any]:
    """A Deployment of one role's vLLM servers in the router's pool (llm-d.ai/role)."""
    argv = cmds[0].argv
    replicas = len(cmds) * int(flag_value(argv, "--data-parallel-size") or 1)
    args = [*without_flags(argv[2:], "--port", "--data-parallel-size"), f"--port={port}"]
    p2p = "--kv-transfer-config" in argv
    ports = [{"containerPort": port, "name": "vllm"}]
    if p2p:
        ports.append({"containerPort": SIDE_PORT, "name": "nixl"})
    container = {"name": "modelserver", "image": cluster.image, "command": argv[:2],
                 "args": args, "env": pod_env(cmds[0], p2p), "ports": ports}
    gpus = int(flag_value(argv, "--tensor-parallel-size") or 1)
    hosts = [c.host for c in cmds if c.host]
    labels = {**pool, "llm-d.ai/role": role, "app.kubernetes.io/name": name}
    pair = {**pool, "llm-d.ai/role": "prefill"} if role == "decode" and not hosts else None
    pod = engine_pod(container, cluster, gpus, p2p, hosts, pair, port="vllm")
    if sidecar:
        pod["initContainers"] = [{
            "name": "routing-proxy", "image": SIDECAR_IMAGE, "restartPolicy": "Always",
            "args": [f"--port={SERVICE_PORT}", "--kv-connector=nixlv2",
                     "--secure-serving=false"],
            "ports": [{"containerPort": SERVICE_PORT, "name": "sidecar"}],
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True}}]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}
