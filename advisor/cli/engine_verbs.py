"""`advisor serve` and `advisor bench`: the bundled engine standalone, and any endpoint measured."""

from __future__ import annotations

from advisor.cli.app import user_errors
from advisor.cli.params import options_command
from advisor.measure.bench_options import BenchOptions
from advisor.serve import ServeOptions


@options_command(ServeOptions)
def serve(opts: ServeOptions) -> None:
    """Run the bundled engine (collocated, disaggregated) or a render server, until ^C."""
    from advisor.serve import run_serve

    with user_errors():
        run_serve(opts)


@options_command(BenchOptions)
def bench(opts: BenchOptions) -> None:
    """Measure an OpenAI-compatible endpoint under a workload (flags as in `vllm bench serve`)."""
    from advisor.measure.bench import run_bench

    with user_errors():
        run_bench(opts)
