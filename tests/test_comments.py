"""Comments say why the code is as it is now: no dates or run stories in the packages (those
go to commit messages and docs/measurements.md), a `# NOTE:` is one sentence of why, never
inside a docstring, and a module's docstring is a few lines (procedures live in docs/)."""

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for pkg in ("engine", "advisor", "workloads", "reports", "scripts")
                 for p in (ROOT / pkg).rglob("*.py"))
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
MODULE_DOC_LINES = 12


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_no_source_file_outside_tests_and_benchmarks_carries_a_date():
    dated = [_where(p, i + 1) for p in SOURCES
             for i, line in enumerate(p.read_text().splitlines()) if DATE.search(line)]
    assert not dated


def test_a_note_is_one_sentence_of_at_most_three_lines_and_never_in_a_docstring():
    bad = []
    for p in SOURCES:
        lines = p.read_text().splitlines()
        for i, line in enumerate(lines):
            if "# NOTE" not in line:
                continue
            at, block = line.index("#"), [line.split("# NOTE", 1)[1]]
            for nxt in lines[i + 1:]:
                if not nxt.strip().startswith("#") or "NOTE" in nxt or nxt.index("#") != at:
                    break
                block.append(nxt.strip()[1:])
            text = " ".join(block)
            if len(block) > 3 or re.search(r"[a-z0-9)]\. +[A-Z]", text):
                bad.append(_where(p, i + 1))
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc and "NOTE" in doc:
                    bad.append(_where(p, getattr(node, "lineno", 1)))
    assert not bad


def test_module_docstrings_are_a_few_lines():
    long = [_where(p, 1) for p in SOURCES
            if (doc := ast.get_docstring(ast.parse(p.read_text()), clean=False))
            and doc.count("\n") + 1 > MODULE_DOC_LINES]
    assert not long
