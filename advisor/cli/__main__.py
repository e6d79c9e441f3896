"""`python -m advisor.cli`: the `advisor` command."""

from advisor.cli import app

app()
