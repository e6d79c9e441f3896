"""`advisor import`: the advice from runs other tools measured."""

from __future__ import annotations

from advisor.cli.app import user_errors
from advisor.cli.params import options_command
from advisor.imports.options import ImportOptions


@options_command(ImportOptions, name="import")
def import_runs(opts: ImportOptions) -> None:
    """Decide from vLLM bench, aiperf or guidellm results, one placement per --placement."""
    from advisor.imports.command import run_import

    with user_errors():
        run_import(opts)
