"""The commands `advisor deploy` prints are run: for the `tiny` preset, plain and
bidirectional P/D with the project's proxy, every printed line started as printed but for
`vllm serve MODEL`, which becomes the bundled engine's server (it takes vLLM's spelling of
the flags it shares). The answers are token-identical to a collocated server's, and in the
bidirectional deployment turn 3's prefill computes only its new tokens."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.engines.vllm.runtime import ports_free
from advisor.rundata.evidence import Evidence, PlacementEvidence, WorkloadEvidence
from advisor.rundata.manifest import Manifest
from advisor.rundata.recommendation import Recommendation
from advisor.rundata.rundir import RunDir
from advisor.rundata.slo import Slo
from engine.processes.children import free_port, wait_healthy
from tests.cli import advisor
from tests.engine.helpers import random_prompts
from tests.serving.helpers import counter, post

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # four servers, ~10-20 s a case

ENGINE = [sys.executable, "-m", "engine.serve.server", "--model", "tiny"]
BIN = Path(sys.executable).parent
TURNS, NEW, OUT = 3, 12, 5
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _bases() -> tuple[int, int]:
    """A serving base port whose +100, +101, +192, +200 are free, and two free side-channel
    ports after a second base."""
    for _ in range(100):
        base, side = free_port() // 10 * 10, free_port()
        if base + 300 < 65000 and side + 2 < 65000 and ports_free(
                [base + 100, base + 192, base + 200, side, side + 1]):
            return base, side
    raise RuntimeError("no free ports")


def _run_dir(tmp_path: Path, action: str) -> RunDir:
    run = RunDir(tmp_path / "run")
    run.write_manifest(Manifest.new(0, {"model": "tiny"}))
    run.write_evidence(Evidence(Slo.of(2000, 50), PlacementEvidence("collocated-1"),
                                WorkloadEvidence(mean_prompt_tokens=40, concurrency=1.0),
                                disaggregated=PlacementEvidence("disagg-1p1d")))
    run.write_recommendation(Recommendation(action, [], [], None, [], {}))
    return run


def _printed(script: str, placement: str) -> list[tuple[dict, list[str]]]:
    """The section of `placement`: each command's environment and argv, as printed."""
    out, inside = [], False
    for line in script.splitlines():
        if line.startswith("# --- "):
            inside = line.split()[2] == placement
        elif inside and line and not line.startswith("#"):
            words = shlex.split(line.removesuffix(" &"))
            n = next(i for i, w in enumerate(words) if not ASSIGNMENT.match(w))
            out.append((dict(w.split("=", 1) for w in words[:n]), words[n:]))
    return out


def _as_run(argv: list[str]) -> list[str]:
    """The printed argv as started here: `vllm serve MODEL` -> the bundled server;
    `advisor` -> this environment's advisor."""
    if argv[:2] == ["vllm", "serve"]:
        return [*ENGINE, *argv[3:]]
    if argv[0] == "advisor":
        return [str(BIN / "advisor"), *argv[1:]]
    raise AssertionError(f"an unexpected command was printed: {argv}")


def _conversation(url: str, cid: str | None, seed: int) -> list[tuple[list[int], int]]:
    """TURNS completion turns, each prompt the last one, its reply and NEW tokens; every
    turn's output and prompt length."""
    news = random_prompts(TURNS, (NEW, NEW), seed=seed)
    prompt, outs = random_prompts(1, (40, 40), seed=100 + seed)[0], []
    for k in range(TURNS):
        body = {"model": "tiny", "prompt": prompt, "max_tokens": OUT, "temperature": 0,
                "ignore_eos": True, **({"conversation_id": cid} if cid else {})}
        status, answer = post(url, body)
        assert status == 200, answer
        ids = answer["choices"][0]["token_ids"]
        outs.append((ids, len(prompt)))
        prompt = prompt + ids + news[k]
    return outs


@pytest.mark.parametrize("action", ["disaggregate", "disaggregate-bidirectional"])
def test_the_printed_pd_commands_run_and_answer_as_collocated(tmp_path, action):
    base, side = _bases()
    out = advisor("deploy", str(_run_dir(tmp_path, action).path), "--proxy", "advisor",
                  "--base-port", str(base), "--side-channel-port", str(side))
    assert out.returncode == 0, out.stderr
    placement = "disaggregated-bidirectional" if action.endswith("bidirectional") else \
        "disaggregated"
    commands = _printed(out.stdout, placement)
    assert [argv[:2] for _, argv in commands] == [["vllm", "serve"]] * 2 + [["advisor", "proxy"]]
    procs = []
    try:
        for env, argv in commands:
            port = argv[argv.index("--port") + 1]
            procs.append(subprocess.Popen(_as_run(argv), env={**os.environ, **env},
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_healthy(f"http://127.0.0.1:{port}", procs[-1], 120)
        col_port = free_port()
        procs.append(subprocess.Popen([*ENGINE, "--port", str(col_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        collocated = f"http://127.0.0.1:{col_port}"
        wait_healthy(collocated, procs[-1], 120)
        proxy, prefiller = f"http://127.0.0.1:{base + 192}", f"http://127.0.0.1:{base + 100}"
        first = _conversation(proxy, "c1", 3)
        # a second conversation of its own: nothing of the first is in any cache
        before = {n: counter(prefiller, n) for n in ("engine:prefill_tokens_computed",
                                                      "engine:prefill_tokens_reused")}
        second = _conversation(proxy, "c2", 4)
        after = {n: counter(prefiller, n) - v for n, v in before.items()}
        reference, reference2 = (_conversation(collocated, None, s) for s in (3, 4))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert first == reference and second == reference2  # token-identical, turn by turn
    computed, reused = after["engine:prefill_tokens_computed"], after[
        "engine:prefill_tokens_reused"]
    # conversation c2's three turns, bidirectional: the first prompt whole, then per turn the
    # reply's last token (sampled, never computed by the decoder) and the new tokens
    pulled_back = reference2[0][1] + (TURNS - 1) * (1 + NEW)
    if action == "disaggregate-bidirectional":
        assert computed == pulled_back and reused > 0
    else:  # prefix caching at vLLM's default: the prefiller reuses only its earlier prompts
        assert computed + reused == sum(n for _, n in reference2) and computed > pulled_back
