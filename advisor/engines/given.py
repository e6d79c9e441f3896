"""Deployments given rather than started by an engine of ours: each at a URL someone
started, or started by a shell command the user gave (advisor.engines.processes runs it),
with its instances' metrics checked before anything is measured."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path

from advisor.engines.engine import Started
from advisor.engines.placement import Placement
from advisor.engines.processes import started
from advisor.engines.topologies import TopologySpec
from advisor.errors import UsageError
from advisor.measure.prom import recognised, scrape_text
from advisor.probe.p2p import P2PMatrix
from advisor.rundata.manifest import EngineRan


@dataclass(frozen=True)
class GivenDeployment:
    """One placement measured at a URL: its front, its instances' /metrics, and the shell
    command that starts it (None: it is up already)."""

    kind: str  # collocated | disagg
    url: str
    metrics: tuple[str, ...] = ()
    cmd: str | None = None


@dataclass(frozen=True)
class GivenEngine:
    """Deployments by URL (or command) as an engine: the placements are the deployments,
    whatever --topologies says; each is waited for with `api_key` asking for `model`."""

    deployments: tuple[GivenDeployment, ...]
    model: str | None
    api_key: str | None = None
    ready_timeout: float = 600.0

    def placements(self, specs: tuple[TopologySpec, ...] = (),
                   matrix: P2PMatrix | None = None) -> list[Placement]:
        """The deployments' placements, collocated first."""
        return [Placement(f"{d.kind}-url", d.kind, url=d.url, metrics=d.metrics, cmd=d.cmd)
                for d in sorted(self.deployments, key=lambda d: d.kind != "collocated")]

    def start(self, p: Placement, stack: contextlib.ExitStack, log_dir: Path) -> Started:
        """`p`'s command run (where it has one) and `p` waited for until ready."""
        return start_at_url(p, stack, log_dir, self.model, self.api_key, self.ready_timeout)

    def ran(self, placements: list[Placement]) -> EngineRan | None:
        """Nothing: what a deployment runs is its own (its URL and command are in the
        manifest's options)."""
        return None


def start_at_url(p: Placement, stack: contextlib.ExitStack, log_dir: Path, model: str | None,
                 api_key: str | None, ready_timeout: float) -> Started:
    """`p`, a deployment at a URL, started by its command where it has one (its instances
    waited for, then its front), else waited for; its metrics checked."""
    assert p.url is not None  # a deployment measured at a URL
    gone = stack.enter_context(started(p, log_dir, model, api_key, ready_timeout))
    return Started(p.url, p.instances, tuple(metric_urls(p)), None, gone,
                   started_here=bool(p.instances), one=(p.instances or (p.url,))[0])


def metric_urls(p: Placement) -> list[str]:
    """Where `p`'s instances' metrics are read: the URLs given (each checked: UsageError
    naming the flag when one cannot be read or holds no serving metrics), else the front's
    own /metrics when it has one (vLLM's toy proxy has none: then nothing, said once)."""
    if p.metrics:
        for url in p.metrics:
            try:
                text = scrape_text([url])
            except (OSError, ValueError) as e:
                raise UsageError(f"{p.flag}-metrics {url}: cannot read it: "
                                 f"{getattr(e, 'reason', e)}") from None
            if not recognised(text):
                raise UsageError(f"{p.flag}-metrics {url}: none of the expected metrics "
                                 "(engine:*, vllm:*, process_cpu_seconds_total)")
        return list(p.metrics)
    assert p.url is not None  # a deployment measured at a URL
    own = p.url.rstrip("/") + "/metrics"
    try:
        if recognised(scrape_text([own])):
            return [own]
    except (OSError, ValueError):
        pass
    print(f"{p.name}: no metrics at {own}: KV-transfer and CPU evidence need "
          f"{p.flag}-metrics (each instance's /metrics)", file=sys.stderr, flush=True)
    return []


