"""`advisor serve`, `advisor proxy` and `advisor bench`: the bundled engine standalone, the
P/D proxy in front of any instances, and any endpoint measured."""

from __future__ import annotations

from advisor.cli.app import user_errors
from advisor.cli.params import options_command
from advisor.measure.bench_options import BenchOptions
from advisor.proxy import ProxyOptions
from advisor.verbs.serve import ServeOptions


@options_command(ServeOptions)
def serve(opts: ServeOptions) -> None:
    """Run the bundled engine (collocated, disaggregated), a render server, or the same on vLLM,
    until ^C."""
    from advisor.verbs.serve import serve as run_serve

    with user_errors():
        run_serve(opts)


@options_command(ProxyOptions)
def proxy(opts: ProxyOptions) -> None:
    """Run the P/D proxy in front of prefill and decode instances (vLLM's or ours), until ^C."""
    from advisor.proxy import run_proxy

    with user_errors():
        run_proxy(opts)


@options_command(BenchOptions)
def bench(opts: BenchOptions) -> None:
    """Measure an OpenAI-compatible endpoint under a workload (flags as in `vllm bench serve`)."""
    from advisor.verbs.bench import bench as run_bench

    with user_errors():
        run_bench(opts)
