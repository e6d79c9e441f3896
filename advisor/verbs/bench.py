"""`advisor bench`: the endpoint at --base-url, or (--engine) one instance of the bundled
engine or of vLLM started here as the sweep starts it, measured, its engine in the
manifest."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from advisor.engines.start import running
from advisor.engines.topologies import TopologySpec
from advisor.errors import UsageError
from advisor.measure.bench import run_bench
from advisor.measure.bench_options import BenchOptions
from advisor.rundata.result import RunResult


def bench(opts: BenchOptions, argv: list[str] | None = None) -> RunResult:
    """`advisor bench` as the options say."""
    if opts.engine is None:
        return run_bench(opts, argv)
    if opts.base_url != BenchOptions.base_url or opts.host or opts.port:
        raise UsageError("--engine starts the server it measures; --base-url / --host / "
                         "--port measure one that runs already: give one or the other")
    with running(opts.engine, TopologySpec("collocated", 0, 1), opts.model, "auto", "cpu",
                 opts.ready_timeout, Console(stderr=True)) as r:
        return run_bench(dataclasses.replace(opts, base_url=r.up.url, engine=None,
                                             model=r.model), argv, r.engine)
