"""The `advisor` command line: parses options and calls one function per verb.

A user's mistake (UsageError) or a deployment that would not start (LaunchError) is one
line on stderr and exit code 2; anything else is a bug and shows its traceback. Each
module here registers its verbs on `app` when imported, in the order `--help` lists them.
"""
# ruff: noqa: I001  (the verb modules' import order is --help's order, not alphabetical)

from advisor.cli.app import app
from advisor.cli import engine_verbs, probe_verbs, sweep_verb, plan_verb, import_verb, advice_verbs  # noqa: F401

__all__ = ["app"]
