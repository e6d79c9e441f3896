"""A model name, a placement name or a note from a file someone hands you cannot steer what
`advisor deploy` prints or what report.md renders (issue 56, items 1 and 9): a name that is
no model name is refused naming where it came from, and any text that reaches a comment line
stays on that line."""

import json
import subprocess

import pytest
import yaml

from advisor.deploy import kube, llmd
from advisor.deploy.pods import Cluster
from advisor.deploy.shell import as_shell
from advisor.rundata.manifest import Manifest
from advisor.rundata.recommendation import Command, DeployCommands, DeployPlan
from advisor.rundata.rundir import RunDir
from tests.advisor.test_deploy import run_dir
from tests.cli import advisor_here, said

pytestmark = pytest.mark.integration

HOSTILE = "Qwen/Qwen2.5-7B\ntouch /tmp/advisor-pwned\n---\nkind: Pod\nspec: {hostPID: true}"


@pytest.mark.parametrize("fmt", ["sh", "k8s", "llm-d"])
def test_a_hostile_model_in_a_run_directory_is_refused_by_name(tmp_path, fmt):
    run = run_dir(tmp_path, "disaggregate")
    run.write_manifest(Manifest.new(0, {"model": HOSTILE}))
    out = advisor_here("deploy", str(run.path), "--format", fmt)
    assert out.returncode == 2 and out.stdout == ""
    (line,) = said(out.stderr)
    assert "manifest.json: config.model" in line and "is not a model name" in line


def test_a_hostile_model_flag_is_refused_by_name(tmp_path):
    run = run_dir(tmp_path, "disaggregate")
    for bad in ("x\ny", "--trust-remote-code", "a" * 300):
        out = advisor_here("deploy", str(run.path), "--model", bad)
        assert out.returncode == 2 and out.stdout == ""
        assert "--model" in said(out.stderr)[0]


def test_an_imported_file_naming_a_hostile_model_is_refused_by_name(tmp_path):
    result = tmp_path / "vllm.json"
    result.write_text(json.dumps({
        "backend": "openai", "model_id": HOSTILE, "request_rate": 1.0,
        "start_times": [0.0, 1.0], "ttfts": [0.02, 0.02], "itls": [[0.005], [0.005]],
        "input_lens": [10, 10], "output_lens": [2, 2], "errors": ["", ""]}))
    out = advisor_here("import", "--placement", f"collocated={result}", "--placement",
                       f"disagg={result}", "--out", str(tmp_path / "out"))
    assert out.returncode == 2, out.stderr
    (line,) = said(out.stderr)
    assert str(result) in line and "is not a model name" in line
    assert not (tmp_path / "out").exists()


def _deployment(text: str) -> DeployCommands:
    """A P/D deployment whose names and notes all carry `text`."""
    vllm = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--port"]
    plan = DeployPlan(f"disaggregated{text}", [
        Command("prefill", [*vllm, "8100"]), Command("decode", [*vllm, "8200"]),
        Command("proxy", ["python", "proxy.py", "--port", "8192", "--prefiller-ports", "8100",
                          "--decoder-ports", "8200"])], [f"a note{text}"])
    return DeployCommands("Qwen/Qwen2.5-7B-Instruct", [0, 1], plan.placement, [plan],
                      [f"deployment note{text}"])


@pytest.mark.parametrize("text", ["\ntouch /tmp/advisor-pwned", "\u2028touch x", "\x85touch x",
                                  "\r\nkind: Pod"])
def test_text_from_files_stays_on_its_comment_line(tmp_path, text):
    script = as_shell(_deployment(text))
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    # every line that is not a comment is one of the commands, nothing else
    ran = [ln for ln in script.splitlines() if ln and not ln.startswith("#")]
    assert len(ran) == 3 and all(ln.startswith(("vllm ", "python ")) for ln in ran)
    assert "touch" not in "".join(ran)
    benign = _deployment("")
    for render in (lambda d: kube.as_k8s(d, Cluster(image_override="vllm/vllm-openai:v0"),
                                         "front:v0"),
                   lambda d: llmd.as_llmd(d, Cluster(image_override="vllm/vllm-openai:v0"))):
        got = list(yaml.safe_load_all(render(_deployment(text))))
        # the same objects with the same fields: the text is inside values, never a key
        want = list(yaml.safe_load_all(render(benign)))
        assert [_shape(d) for d in got] == [_shape(d) for d in want]


def _shape(value):
    """A parsed YAML document's keys, all the way down (values left out)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return None


def test_report_md_shows_html_and_fences_as_text(tmp_path):
    from advisor.output.report import run_report
    from tests.fixtures import FIXTURE_RUN

    run = RunDir(tmp_path / "run")
    subprocess.run(["cp", "-r", str(FIXTURE_RUN), str(run.path)], check=True)
    manifest = run.read_manifest()
    config = {**manifest.config.options(), "model": "m```\n<script>alert(1)</script>"}
    (run.path / "manifest.json").write_text(json.dumps({**manifest.to_json(),
                                                        "config": config}))
    rec = json.loads((run.path / "recommendation.json").read_text())
    rec["reasons"] = ["<img src=x onerror=alert(1)>", "a [link](javascript:alert(1))"]
    (run.path / "recommendation.json").write_text(json.dumps(rec))
    run_report(str(run.path))
    md = (run.path / "report.md").read_text()
    assert "<script>" not in md and "<img" not in md and "[link](" not in md
    assert "&lt;script>" in md and "&lt;img src=x" in md
    assert md.splitlines()[0].startswith("# advisor report: long-prompt on m\\`\\`\\`")
