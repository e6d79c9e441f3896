"""`advisor probe`: this host's GPUs, links and P2P matrix, and a transfer check on the P/D
at --transfer-check, or (--engine) on a 1P1D of the bundled engine or of vLLM (NixlConnector,
behind advisor proxy) started here, read from its decoder's own counters."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from advisor.engines.start import running
from advisor.engines.topologies import TopologySpec
from advisor.errors import UsageError
from advisor.probe.options import ProbeOptions
from advisor.probe.probe import run_probe


def probe(opts: ProbeOptions) -> None:
    """`advisor probe` as the options say."""
    if opts.engine is None:
        run_probe(opts)
        return
    if opts.transfer_check or opts.metrics_urls:
        raise UsageError("--engine starts the P/D pair it checks; --transfer-check URL / "
                         "--metrics-url check one that runs already: give one or the other")
    with running(opts.engine, TopologySpec("disagg", 1, 1), opts.model, "auto", "cpu",
                 opts.ready_timeout, Console(stderr=True)) as r:
        decoders = r.up.metrics[1:]  # the prefiller's first
        run_probe(dataclasses.replace(opts, engine=None, transfer_check=r.up.url,
                                      metrics_urls=decoders, model=r.model))
