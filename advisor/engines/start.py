"""Where every verb starts its engine: `engine_here` picks the implementation for --engine
(the bundled engine, or real vLLM found here), `check_here` refuses a model it cannot run
before anything loads, and `running` starts one placement for bench, serve and probe and
stops it when the block ends."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from advisor.engines.bundled import BundledEngine
from advisor.engines.engine import Engine, Started
from advisor.engines.placement import Placement
from advisor.engines.topologies import TopologySpec
from advisor.engines.vllm.engine import VllmEngine
from advisor.engines.vllm.runtime import VllmSettings, check_model
from advisor.errors import UsageError
from advisor.flag_groups import DEFAULT_MODELS, EngineKind
from advisor.rundata.manifest import EngineRan
from engine import api


@dataclass(frozen=True)
class EngineHere:
    """An engine to start on this machine, and what it serves: the model (a preset or a
    local HF directory), dtype (resolved, not auto) and device, and each engine's own
    settings (the bundled engine's connector and link emulation; vLLM's toy proxy, tool
    parser and start-up time)."""

    kind: EngineKind
    model: str
    dtype: str
    device: str = "cpu"
    connector: str = "shm"
    link_emulation: str | None = None
    toy_proxy: str | None = None
    tools: bool = False
    ready_timeout: float = 600.0
    base_port: int | None = None  # vLLM's ports from here (None: a free range)


def engine_here(e: EngineHere) -> Engine:
    """The engine `e` names; UsageError where vLLM is asked for and none is found."""
    if e.kind == "vllm":
        settings = VllmSettings.found(e.model, e.dtype, e.device, e.toy_proxy, e.tools)
        return VllmEngine(settings, e.ready_timeout, e.base_port)
    return BundledEngine(e.model, e.dtype, e.device, e.connector, e.link_emulation)


def check_here(kind: EngineKind, model: str, device: str) -> None:
    """UsageError naming --model where `kind` cannot run `model` on `device` (an unknown
    model; for vLLM's CPU build, a head size it refuses), before anything loads."""
    if kind == "vllm":
        check_model(model, device)
        return
    try:
        api.load_model_config(model)
    except ValueError as e:
        raise UsageError(f"--model: {e}") from None


def resolved_dtype(dtype: str, device: str) -> str:
    """`dtype`, `auto` resolved as the engines resolve it on `device`."""
    return api.resolve_dtype(dtype, device).dtype if dtype == "auto" else dtype


@dataclass(frozen=True)
class Running:
    """A placement a verb started: the placement, how it answers, the model it serves and
    what a manifest records of the engine (None for the bundled engine)."""

    placement: Placement
    up: Started
    model: str
    engine: EngineRan | None


@contextlib.contextmanager
def running(kind: EngineKind, spec: TopologySpec, model: str | None, dtype: str, device: str,
            ready_timeout: float, console: Console, base_port: int | None = None
            ) -> Iterator[Running]:
    """`spec` on `kind` (the model a preset or HF directory, default the engine's), up
    until the block exits; vLLM's logs in a directory named on the console."""
    name = model or DEFAULT_MODELS[kind]
    check_here(kind, name, device)
    dtype = resolved_dtype(dtype, device)
    engine = engine_here(EngineHere(kind, name, dtype, device, ready_timeout=ready_timeout,
                                    base_port=base_port))
    [p] = engine.placements((spec,))
    ran = engine.ran([p])
    logs = Path(tempfile.mkdtemp(prefix=f"advisor-{kind}-"))
    console.print(f"starting {p.name} on " + (f"{ran.distribution} {ran.version}" if ran
                                               else "the bundled engine")
                  + f" ({name}, {dtype})" + (f"; logs in {logs}" if ran else ""))
    with contextlib.ExitStack() as stack:
        yield Running(p, engine.start(p, stack, logs), name, ran)
