"""The docs stay true: the CLI reference and the run-directory reference are what their
scripts generate from the code now, every verb and flag `--help` shows is in the CLI
reference, every relative link resolves, and the README stays a short front door that
repeats no docs page."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
README = ROOT / "README.md"


@pytest.mark.parametrize("script", ["cli_reference.py", "schema_reference.py"])
def test_the_generated_references_are_current(script):
    out = subprocess.run([sys.executable, f"scripts/{script}", "--check"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_every_verb_and_flag_in_help_is_in_the_cli_reference():
    ref = (ROOT / "docs" / "reference" / "cli.md").read_text()
    runner = CliRunner()
    top = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    verbs = re.findall(r"^│ ([a-z][a-z-]+) ", top, flags=re.M)
    assert len(verbs) >= 9
    for verb in verbs:
        assert f"## advisor {verb}" in ref
        shown = runner.invoke(app, [verb, "--help"], env={"COLUMNS": "200"}).output
        flags = set(re.findall(r"(--[a-z][a-z0-9-]*)", shown)) - {"--help"}
        assert flags, verb
        missing = [f for f in flags if f"`{f}`" not in ref]
        assert not missing, f"advisor {verb}: {missing}"


def test_relative_links_resolve():
    broken = []
    for page in [README, *DOCS, ROOT / "benchmarks" / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken


def _prose(text: str) -> list[str]:
    """Lines outside code fences, stripped."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line.strip())
    return out


def test_the_readme_is_short_and_repeats_no_docs_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200
    docs = "\n".join(" ".join(_prose(p.read_text())) for p in DOCS)
    repeated = [line for line in _prose(README.read_text())
                if len(line) > 60 and not line.startswith("|") and line in docs]
    assert not repeated
