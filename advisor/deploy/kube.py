"""A deployment on Kubernetes, from the same commands the shell form runs: plain manifests
(`--format k8s`: a Deployment and a Service per tier, and the front), or Helm values for
llm-d's model-service chart (`--format llm-d`: prefill and decode replicas, tensor
parallelism, the same vLLM flags and kv-transfer-config, the routing sidecar), as the
chart's values.yaml (llm-d-incubation/llm-d-modelservice v0.4.0) and llm-d's
guides/pd-disaggregation/ms-pd/values.yaml lay them out."""

from __future__ import annotations

import math

import yaml

from advisor.deploy.shell import comment
from advisor.probe.shapes import shape_of
from advisor.rundata.recommendation import Command, Deployment, DeployPlan

VLLM_IMAGE = "vllm/vllm-openai:latest"
PART_OF = "advisor"
SIDE_PORT = 5600  # NIXL's side channel in every pod (one instance per pod)
POD_IP = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
# llm-d's chart: vLLM on servicePort in a prefill pod, on the sidecar's targetPort in a
# decode pod (the routing sidecar takes servicePort there)
LLMD_SERVICE_PORT, LLMD_TARGET_PORT = 8000, 8200


class _Dumper(yaml.SafeDumper):
    """Every value written where it is used: no &anchors and *aliases for people to chase."""

    def ignore_aliases(self, data) -> bool:
        return True


def _yaml(docs: list[dict]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False)


def chosen(deploy: Deployment) -> DeployPlan:
    """The plan a manifest deploys: the recommended one, else the measured P/D, else the
    first (the advice named none: measure-first)."""
    by = {p.placement: p for p in deploy.plans}
    return by.get(deploy.recommended or "") or next(
        (p for p in deploy.plans if p.placement.startswith("disaggregated")), deploy.plans[0])


def _flag(argv: list[str], flag: str, default: str | None = None) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else default


def _without(argv: list[str], *flags: str) -> list[str]:
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


def _env(c: Command, p2p: bool) -> list[dict]:
    """The command's environment but what the pod decides (its GPUs, its own address)."""
    env: list[dict] = [{"name": k, "value": v} for k, v in c.env.items()
           if k not in ("CUDA_VISIBLE_DEVICES", "VLLM_NIXL_SIDE_CHANNEL_HOST",
                        "VLLM_NIXL_SIDE_CHANNEL_PORT")]
    if p2p:
        env += [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", **POD_IP},
                {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(SIDE_PORT)}]
    return env


def _tier(name: str, image: str, c: Command, argv: list[str], replicas: int,
          gpus: int) -> list[dict]:
    """A Deployment of `replicas` pods running `argv` (c's, adjusted) and its Service."""
    port = int(_flag(argv, "--port") or 8000)
    p2p = "--kv-transfer-config" in argv
    ports = [{"containerPort": port, "name": "http"}]
    if p2p:
        ports.append({"containerPort": SIDE_PORT, "name": "nixl"})
    container = {"name": name.rsplit("-", 1)[-1], "image": image, "command": argv[:2],
                 "args": argv[2:], "env": _env(c, p2p), "ports": ports,
                 "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}}}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": PART_OF}
    return [{"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": name, "labels": labels},
             "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                      "template": {"metadata": {"labels": labels},
                                   "spec": {"containers": [container]}}}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
             "spec": {"selector": labels,
                      "ports": [{"name": "http", "port": port, "targetPort": "http"}]}}]


def as_k8s(deploy: Deployment, image: str = VLLM_IMAGE, front_image: str = "advisor") -> str:
    """Multi-document YAML for the chosen plan: each tier a Deployment (replicas: its
    instances) and a Service, P/D pods with NIXL's side channel on their pod IP, and the
    front (advisor proxy, or the render front) in `front_image`, this project installed."""
    plan = chosen(deploy)
    base = f"{PART_OF}-{plan.placement}"
    docs: list[dict] = []
    urls: dict[str, str] = {}
    for role in ("collocated", "prefill", "decode", "render", "engine"):
        cmds = [c for c in plan.commands if c.role == role]
        if not cmds:
            continue
        argv = list(cmds[0].argv)
        replicas = len(cmds)
        if role == "collocated":  # a data-parallel rank per pod
            replicas = int(_flag(argv, "--data-parallel-size") or 1) * len(cmds)
            argv = _without(argv, "--data-parallel-size")
        gpus = int(_flag(argv, "--tensor-parallel-size") or 1) if argv[:2] == ["vllm", "serve"] \
            else 0
        docs += _tier(f"{base}-{role}", image, cmds[0], argv, replicas, gpus)
        urls[role] = f"http://{base}-{role}:{_flag(argv, '--port')}"
    front = _front(plan, urls)
    if front:
        docs += _tier(f"{base}-front", front_image, Command("front", front), front, 1, 0)
    head = [comment(f"advisor deploy --format k8s: {plan.placement} of {deploy.model}")]
    head += [comment(n) for n in _k8s_notes(plan)]
    return "\n".join(head) + "\n" + _yaml(docs)


def _front(plan: DeployPlan, urls: dict[str, str]) -> list[str] | None:
    """The front's argv against the tiers' Services (advisor proxy in place of vLLM's
    scripts, which its image lacks), on every address."""
    port = next((_flag(c.argv, "--port") for c in plan.commands if c.role in
                 ("proxy", "front")), None)
    if "prefill" in urls:
        return ["advisor", "proxy", "--prefill", urls["prefill"], "--decode", urls["decode"],
                "--host", "0.0.0.0", "--port", str(port)] + (
            ["--bidirectional"] if plan.placement.endswith("bidirectional") else [])
    if "render" in urls:
        return ["python", "-m", "engine.fronts.render_front", "--render", urls["render"],
                "--engine", urls["engine"], "--host", "0.0.0.0", "--port", str(port)]
    return None


def _k8s_notes(plan: DeployPlan) -> list[str]:
    notes = [n for n in plan.notes if "http://" not in n and "checkout" not in n]
    if plan.placement.startswith("disaggregated"):
        notes.append("the front is advisor proxy (vLLM's proxies are scripts in its source "
                     "tree, not in its image); --front-image names an image with this "
                     "project installed")
    return notes


def as_llmd(deploy: Deployment, image: str = VLLM_IMAGE) -> str:
    """Helm values for llm-d's model-service chart: the chosen plan's prefill and decode
    tiers (a collocated plan: decode replicas only, no sidecar), each with the vLLM flags
    of its shell command but --port and --tensor-parallel-size (the chart sets both)."""
    plan = chosen(deploy)
    by_role = {r: [c for c in plan.commands if c.role == r]
               for r in ("collocated", "prefill", "decode", "engine")}
    pd = bool(by_role["prefill"])
    decoders = by_role["decode"] or by_role["collocated"] or by_role["engine"]
    if not decoders:
        raise ValueError(f"{plan.placement}: nothing for llm-d's model-service chart")
    decode = _llmd_tier(decoders, image, LLMD_TARGET_PORT if pd else LLMD_SERVICE_PORT)
    if by_role["collocated"]:
        decode["replicas"] *= int(_flag(decoders[0].argv, "--data-parallel-size") or 1)
    values = {
        "multinode": False,
        "modelArtifacts": {"name": deploy.model, "uri": f"hf://{deploy.model}",
                           "size": _volume(deploy.model),
                           "labels": {"llm-d.ai/inferenceServing": "true",
                                      "llm-d.ai/model": deploy.model.split("/")[-1].lower()}},
        "accelerator": {"type": "nvidia"},
        "routing": {"servicePort": LLMD_SERVICE_PORT,
                    "proxy": {"enabled": pd, "targetPort": LLMD_TARGET_PORT,
                              "connector": "nixlv2", "secure": False}},
        "decode": decode,
        "prefill": (_llmd_tier(by_role["prefill"], image, LLMD_SERVICE_PORT) if pd
                    else {"create": False, "replicas": 0}),
    }
    head = [comment(f"advisor deploy --format llm-d: {plan.placement} of {deploy.model}, "
                    "values for llm-d's model-service chart "
                    "(llm-d-incubation/llm-d-modelservice v0.4.0)")]
    if plan.placement.endswith("bidirectional"):
        head.append("# llm-d's routing sidecar keeps no conversation's decoder blocks for its "
                    "next turn: bidirectional reuse needs a router that does (advisor proxy, "
                    "--format k8s)")
    if plan.placement == "render-split":
        head.append("# the chart has no render tier: the render servers and the render front "
                    "go as in --format k8s")
    return "\n".join(head) + "\n" + _yaml([values])


def _llmd_tier(cmds: list[Command], image: str, port: int) -> dict:
    argv = cmds[0].argv
    tp = int(_flag(argv, "--tensor-parallel-size") or 1)
    args = _without(argv[3:], "--port", "--tensor-parallel-size", "--data-parallel-size")
    p2p = "--kv-transfer-config" in argv
    ports = [{"containerPort": port, "name": "vllm", "protocol": "TCP"}]
    if p2p:
        ports.append({"containerPort": SIDE_PORT, "name": "nixl", "protocol": "TCP"})
    return {"create": True, "replicas": len(cmds), "parallelism": {"tensor": tp},
            "containers": [{"name": "vllm", "image": image, "modelCommand": "vllmServe",
                            "args": args, "env": _env(cmds[0], p2p), "ports": ports,
                            "mountModelVolume": True}]}


def _volume(model: str) -> str:
    """The model volume: its bf16 weights and a fifth more, where its shape is known."""
    try:
        gib = shape_of(model).weight_bytes() / 2**30
    except ValueError:
        return "100Gi"
    return f"{max(1, math.ceil(gib * 1.2))}Gi"
