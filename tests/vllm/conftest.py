"""Real vLLM (vLLM's CPU build in .tools/vllm, installed by .ci/vllm): the tests here start
it. Where it is not installed they are skipped, and CI, which installs it, runs them.

A start-up costs ~40 s on 2 cores and two instances cannot share the cores, so what the tests
ask of one plain instance is asked in one start (`single`), and each module starts its own
placement after the one before it stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from advisor.engines.processes import started
from advisor.engines.topologies import parse_topologies
from advisor.engines.vllm.locate import find_vllm
from advisor.engines.vllm.model_dir import model_dir
from advisor.engines.vllm.placements import placements
from advisor.engines.vllm.runtime import VllmSettings
from advisor.errors import UsageError
from tests.vllm.client import MODEL, VLLM_CLI, ChatAnswer, chat_answers, complete, prompts

BENCH_REPEATS = 2  # each tool's runs, taken in turn, whose spread is the repeat band
BENCH = ("--model", MODEL, "--dataset-name", "random", "--random-input-len", "128",
         "--random-output-len", "16", "--num-prompts", "24", "--request-rate", "4",
         "--ignore-eos", "--save-result")


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.vllm)
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def vllm_settings(tmp_path_factory):
    """How the tests start vLLM: the mini preset's directory, float32, its whole context."""
    try:
        install = find_vllm()
    except UsageError as e:
        pytest.skip(str(e))
    directory, dummy = model_dir(MODEL, "float32", tmp_path_factory.mktemp("models"))
    return VllmSettings(install, directory, MODEL, "float32", 2048, "cpu", dummy)


@dataclass(frozen=True)
class Single:
    """What one vLLM instance (collocated:1, as the sweep starts it) answered: greedy
    completions of prompts(seed=2), the chat answers of client.CHATS, and the result JSONs
    of `advisor bench --save-result` and `vllm bench serve --save-result` taken in turn."""

    completions: list[list[int]]
    chats: list[ChatAnswer]
    bench: dict[str, list[dict]]


@pytest.fixture(scope="session")
def single(vllm_settings, tmp_path_factory) -> Single:
    [p] = placements(parse_topologies("collocated:1"), vllm_settings)
    logs = tmp_path_factory.mktemp("single")
    with started(p, logs, MODEL, None, 300):
        assert p.url is not None
        completions = [complete(p.url, q) for q in prompts(seed=2)]
        chats = chat_answers(p.url)
        bench: dict[str, list[dict]] = {"advisor": [], "vllm": []}
        for k in range(BENCH_REPEATS):
            for tool, argv in (
                    ("advisor", [sys.executable, "-m", "advisor.cli", "bench"]),
                    ("vllm", [vllm_settings.install.python, "-c", VLLM_CLI, "bench", "serve",
                              "--tokenizer", vllm_settings.model_dir])):
                bench[tool].append(_bench(argv, p.url, k, logs / f"{tool}-{k}"))
    return Single(completions, chats, bench)


def _bench(argv: list[str], url: str, seed: int, out: Path) -> dict:
    """One benchmark's --save-result JSON."""
    run = subprocess.run([*argv, "--base-url", url, *BENCH, "--seed", str(seed),
                          "--result-dir", str(out), "--result-filename", "saved.json"],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return json.loads((out / "saved.json").read_text())
