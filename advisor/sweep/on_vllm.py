"""The sweep's placements on real vLLM (--engine vllm): vLLM found, the model directory it
loads (written for a preset), and each --topologies item as the script advisor.vllm_engine
plans, whose instances the sweep waits for (advisor.sweep.deployments.started)."""

from __future__ import annotations

from advisor.goodput.placements import Placement, on_pairs
from advisor.probe.p2p import P2PMatrix
from advisor.rundata.manifest import EngineRan
from advisor.rundata.recommendation import DeployPlan
from advisor.sweep.options import SweepOptions
from advisor.sweep.topologies import TopologySpec
from advisor.vllm_engine.runtime import (
    CPU_NOTES,
    INSTANCE_ROLES,
    VllmSettings,
    free_base_port,
    plan_for,
    port_of,
    script,
)
from workloads.presets import preset_spec


def on_vllm(opts: SweepOptions, matrix: P2PMatrix | None = None
            ) -> tuple[list[Placement], EngineRan]:
    """The placements (P/D on GPUs on `matrix`'s P2P pairs) and what the manifest records
    of them: vLLM's version, the model directory and each script as run."""
    assert opts.model is not None  # filled by the set-up, or taken back on resume
    settings = VllmSettings.found(opts.model, opts.dtype, opts.device, opts.toy_proxy,
                                  tools=bool(preset_spec(opts.workload).tools))
    install = settings.install
    found = placements(opts.topology_specs, settings, matrix=matrix)
    print(f"engine: {install.distribution} {install.version} ({install.python}), model "
          f"{settings.model_dir}", flush=True)
    return found, engine_ran(settings, found)


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
