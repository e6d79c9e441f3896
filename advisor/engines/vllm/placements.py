"""Placements on real vLLM: each --topologies item as the script advisor.engines.vllm.runtime
plans (the commands `advisor deploy` prints, with this host's ports), whose instances are
waited for one by one (advisor.engines.processes.started), and what a manifest records of
them."""

from __future__ import annotations

from advisor.engines.placement import Placement, on_pairs
from advisor.engines.topologies import TopologySpec
from advisor.engines.vllm.runtime import (
    CPU_NOTES,
    INSTANCE_ROLES,
    VllmSettings,
    free_base_port,
    plan_for,
    port_of,
    script,
)
from advisor.probe.p2p import P2PMatrix
from advisor.rundata.manifest import EngineRan
from advisor.rundata.recommendation import DeployPlan


def engine_ran(settings: VllmSettings, found: list[Placement]) -> EngineRan:
    """What a manifest records of vLLM started here: version, model directory, each
    placement's script as run, and what the CPU build's environment sets, and why."""
    install = settings.install
    return EngineRan("vllm", install.distribution, install.version, install.python,
                     settings.model_dir, {p.name: p.cmd or "" for p in found},
                     list(CPU_NOTES) if settings.device.startswith("cpu") else [])


def placements(specs: tuple[TopologySpec, ...], settings: VllmSettings,
               base_port: int | None = None, matrix: P2PMatrix | None = None
               ) -> list[Placement]:
    """The vLLM placements for `specs`, from `base_port` (default: a free range), P/D on
    GPUs put on `matrix`'s P2P pairs where one was read: each waits for its model's
    instances, then its render servers, then its front. UsageError where the matrix has too
    few GPUs for a P/D."""
    base = base_port or free_base_port()
    out = []
    for s in specs:
        gpus = on_pairs(matrix, s.prefill, s.decode, f"{s.kind}:{s.shape}") \
            if s.prefill and matrix is not None and not settings.device.startswith("cpu") \
            else None
        plan = plan_for(s.kind, s.prefill, s.decode, settings, base, gpus)
        serving = _urls(plan, INSTANCE_ROLES)
        out.append(Placement(s.name, "disagg" if s.prefill else s.kind,
                             url=(_urls(plan, ("proxy", "front")) or serving)[0],
                             metrics=tuple(u + "/metrics" for u in serving),
                             cmd=script(plan), instances=serving + _urls(plan, ("render",)),
                             bidirectional=s.kind == "disagg-bidi", on_gpus=gpus))
    return out


def _urls(plan: DeployPlan, roles: tuple[str, ...]) -> tuple[str, ...]:
    """Where the commands of `roles` serve."""
    return tuple(f"http://127.0.0.1:{port_of(c)}" for c in plan.commands if c.role in roles)
