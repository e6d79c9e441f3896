"""Where a run's evidence came from: the engine, the hardware and the model it was measured
(or simulated, or imported) on, read from its manifest, so that advice and the deployments
made from it say so, and a deployment for another target says it was measured elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.probe.shapes import HF_NAMES
from advisor.rundata.manifest import Manifest

CPU, GPU, SIMULATED, UNKNOWN = "cpu", "gpu", "simulated", "unknown"


@dataclass(frozen=True)
class Origin:
    """`kind`: cpu (instances this host started on its cores), gpu (on its GPUs),
    simulated (advisor plan), unknown (deployments at URLs, or another tool's files)."""

    kind: str
    engine: str
    hardware: str
    model: str | None

    @property
    def text(self) -> str:
        model = f", model {self.model}" if self.model else ""
        return f"{self.engine} on {self.hardware}{model}"


def origin(m: Manifest) -> Origin:
    """What `m`'s run was measured on."""
    model = m.model
    if m.simulated:
        gpu = m.plan.gpu.name if m.plan else "GPUs"
        n = (m.config.gpus or 1) * (m.config.nodes or 1)
        return Origin(SIMULATED, "advisor plan's simulation (nothing measured)", f"{n} x {gpu}",
                      model)
    if m.imported:
        return Origin(UNKNOWN, f"{', '.join(m.imported.tools)} (imported)",
                      "hardware its files do not name", model)
    if m.by_url:
        return Origin(UNKNOWN, "deployments at URLs", "hardware not known here", model)
    engine = (f"vLLM {m.engine.version} ({m.engine.distribution})" if m.engine
              else "the bundled engine")
    if (m.config.device or "cpu") == "cpu":
        cores = f"{m.host.cpus_usable} cores of " if m.host.cpus_usable else ""
        return Origin(CPU, engine, f"CPU ({cores}{m.host.cpu or 'unknown model'})", model)
    gpus = [g.name for g in (m.probe.gpus if m.probe else [])]
    hw = f"{len(gpus)} x {gpus[0]}" if gpus else "GPUs"
    return Origin(GPU, engine, hw, model)


def same_model(a: str | None, b: str | None) -> bool:
    """Whether two model names are the same model (a preset and the published name it
    mimics count as one)."""
    if a is None or b is None:
        return True
    return a == b or HF_NAMES.get(a) == b or HF_NAMES.get(b) == a


def elsewhere(o: Origin, model: str | None) -> str | None:
    """Why a GPU deployment of `model` is not what `o` measured (None: it is): evidence from
    a CPU, another model, or hardware unknown here."""
    why = []
    if o.kind == CPU:
        why.append("a CPU, not GPUs")
    elif o.kind == UNKNOWN:
        why.append(o.hardware)
    if not same_model(o.model, model):
        why.append(f"{o.model}, not {model}")
    return "; ".join(why) or None
