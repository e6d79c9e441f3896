"""The sweep's placements on real vLLM (--engine vllm): vLLM found, the model directory it
loads (written for a preset), and each --topologies item as the script advisor.vllm_engine
plans, whose instances the sweep waits for (advisor.sweep.deployments.started)."""

from __future__ import annotations

from pathlib import Path

from advisor.errors import UsageError
from advisor.goodput.placements import Placement
from advisor.probe.p2p import P2PMatrix
from advisor.probe.p2p_pairs import place
from advisor.rundata.manifest import EngineRan
from advisor.rundata.recommendation import DeployPlan
from advisor.sweep.options import SweepOptions
from advisor.sweep.topologies import TopologySpec
from advisor.vllm_engine.locate import find_vllm
from advisor.vllm_engine.model_dir import model_dir
from advisor.vllm_engine.runtime import (
    CPU_NOTES,
    INSTANCE_ROLES,
    VllmSettings,
    free_base_port,
    plan_for,
    port_of,
    script,
)
from engine import api


def on_vllm(opts: SweepOptions, matrix: P2PMatrix | None = None
            ) -> tuple[list[Placement], EngineRan]:
    """The placements (P/D on GPUs on `matrix`'s P2P pairs) and what the manifest records
    of them: vLLM's version, the model directory and each script as run."""
    install = find_vllm()
    assert opts.model is not None  # filled by the set-up, or taken back on resume
    directory, dummy = model_dir(opts.model, opts.dtype)
    settings = VllmSettings(install, directory, opts.model, opts.dtype,
                            api.load_model_config(opts.model).max_position_embeddings,
                            opts.device, dummy,
                            str(Path(opts.toy_proxy).resolve()) if opts.toy_proxy else None)
    found = placements(opts.topology_specs, settings, matrix=matrix)
    print(f"engine: {install.distribution} {install.version} ({install.python}), model "
          f"{directory}", flush=True)
    return found, EngineRan("vllm", install.distribution, install.version, install.python,
                            directory, {p.name: p.cmd or "" for p in found},
                            list(CPU_NOTES) if opts.device.startswith("cpu") else [])


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
        gpus = None
        if s.prefill and matrix is not None and not settings.device.startswith("cpu"):
            try:
                gpus = place(matrix, list(range(len(matrix.gpus))), s.prefill, s.decode)
            except ValueError as e:
                raise UsageError(f"--topologies {s.kind}:{s.shape}: {e}") from None
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
