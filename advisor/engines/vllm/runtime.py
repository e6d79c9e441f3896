"""How the project starts real vLLM here: each placement as the commands `advisor deploy`
prints (advisor.deploy.vllm), with this host's ports, cores or GPUs, model directory and
what vLLM's CPU build needs, as one shell script whose front is advisor proxy."""

from __future__ import annotations

import os
import random
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from advisor.deploy.shell import as_shell
from advisor.deploy.vllm import (
    DECODE_OFFSET,
    PREFILL_OFFSET,
    PROXY_OFFSET,
    RENDER_OFFSET,
    Runtime,
    Site,
    collocated,
    disaggregated,
    render_split,
)
from advisor.engines.vllm.locate import VllmInstall, find_vllm
from advisor.engines.vllm.model_dir import model_dir
from advisor.errors import UsageError
from advisor.flag_groups import DEFAULT_MODELS
from advisor.probe.p2p_pairs import GpuPlacement
from advisor.rundata.recommendation import Command, DeployCommands, DeployPlan
from engine import api

HOOK_DIR = Path(__file__).parent / "hook"
KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE: each CPU instance's KV, in GiB
SIDE_OFFSET = 400  # NIXL side channels, from the base port
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
INSTANCE_ROLES = ("collocated", "prefill", "decode", "engine")  # what serves the model
# NOTE: vLLM's workers spin (sched_yield) for a second after each step; on cores the client
# and the front share, only the idle scheduling class keeps that from taking their share
IDLE_CLASS = ("chrt", "--idle", "0")
# what a CPU instance's environment adds, and why (the manifest and docs say so)
CPU_NOTES = (
    "each instance is bound to its cores with VLLM_CPU_OMP_THREADS_BIND",
    "each instance runs in the idle scheduling class (chrt --idle 0): vLLM's workers "
    "busy-wait (sched_yield) for a second after each step, which left the measuring client's "
    "sends 60-2700 ms late at p99 at normal priority and at niceness 10 alike",
    "NIXL's UCX progress thread is off (ADVISOR_NIXL_PROGRESS_THREAD=off, "
    "advisor/engines/vllm/hook): it polls without pause and held a whole core per instance, "
    "idle or not; vLLM's transfer-status checks progress the transfers instead")


# the bundled engine's tool-call markup (its default template's), parsed by vLLM as Hermes's
TOOL_PARSER = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
VLLM_DEFAULT_MODEL = DEFAULT_MODELS["vllm"]
# vLLM 0.32.0's CPUAttentionBackend.get_supported_head_sizes (v1/attention/backends/cpu_attn.py)
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def check_model(model: str, device: str) -> api.ModelConfig:
    """`model`'s configuration; UsageError naming --model where it is unknown, or where
    vLLM's CPU build cannot run it, before anything starts."""
    try:
        cfg = api.load_model_config(model)
    except ValueError as e:
        raise UsageError(f"--model: {e}") from None
    if device.startswith("cpu") and cfg.head_dim not in VLLM_CPU_HEAD_SIZES:
        raise UsageError(f"--model {model}: vLLM's CPU attention takes head sizes of "
                         f"{', '.join(map(str, VLLM_CPU_HEAD_SIZES))}, not {cfg.head_dim} "
                         f"(--model {VLLM_DEFAULT_MODEL} is the smallest preset it runs)")
    return cfg


@dataclass(frozen=True)
class VllmSettings:
    """What every vLLM placement of a sweep shares: the vLLM, the model directory it loads,
    the name clients ask for, dtype, context, and whether it runs on CPU cores or GPUs."""

    install: VllmInstall
    model_dir: str
    served: str
    dtype: str
    context: int
    device: str = "cpu"
    dummy_weights: bool = False  # the directory has no weights: --load-format dummy
    toy_proxy: str | None = None  # vLLM's toy_proxy_server.py, P/D's front instead of ours
    tools: bool = False  # the requests carry tools: every server parses tool calls (Hermes)

    @classmethod
    def found(cls, model: str, dtype: str, device: str, toy_proxy: str | None = None,
              tools: bool = False) -> VllmSettings:
        """The vLLM found here (UsageError where none is) serving `model` (a preset, its
        directory written here, or an HF directory) in `dtype` on `device`, its whole
        context; `tools`: requests with tools, which vLLM refuses without a tool-call
        parser."""
        context = check_model(model, device).max_position_embeddings
        install = find_vllm()
        directory, dummy = model_dir(model, dtype)
        return cls(install, directory, model, dtype, context, device, dummy,
                   str(Path(toy_proxy).resolve()) if toy_proxy else None, tools)

    def runtime(self) -> Runtime:
        """How each instance starts here."""
        flags = ("--host", "127.0.0.1", "--served-model-name", self.served, "--dtype", self.dtype,
                 "--max-model-len", str(self.context),
                 *(("--load-format", "dummy") if self.dummy_weights else ()),
                 *(TOOL_PARSER if self.tools else ()))
        if not self.device.startswith("cpu"):
            return Runtime(self.install.server, flags, render=self.install.render)
        env = (("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB)), ("PYTHONPATH", str(HOOK_DIR)),
               ("ADVISOR_NIXL_PROGRESS_THREAD", "off"))
        # a render server is request-path CPU work like the front's: it keeps its priority
        return Runtime((*IDLE_CLASS, *self.install.server), flags, env, cpu=True,
                       render=self.install.render)


def units(n: int, device: str) -> list[list[int]]:
    """Each of `n` instances' cores (this process's, shared out evenly; shared in turn where
    there are fewer than `n`) or GPU (one each)."""
    if not device.startswith("cpu"):
        return [[i] for i in range(n)]
    cores = sorted(os.sched_getaffinity(0))
    width = max(1, len(cores) // n)
    return [[cores[(i * width + j) % len(cores)] for j in range(width)] for i in range(n)]


def plan_for(kind: str, prefill: int, decode: int, settings: VllmSettings,
             base_port: int, gpus: GpuPlacement | None = None) -> DeployPlan:
    """A placement (a --topologies kind with its prefillers and decoders or replicas) as
    advisor.deploy.vllm plans it, on this host's cores or GPUs from `base_port`: P/D (its
    instances on `gpus` where given: the P2P matrix's pairs) and collocated replicas behind
    advisor proxy, the render split behind its render front (one render server)."""
    site = Site(base_port=base_port, side_port=base_port + SIDE_OFFSET)
    runtime = settings.runtime()
    if prefill:
        toy = settings.toy_proxy if kind == "disagg" else None
        groups = gpus.prefill + gpus.decode if gpus else units(prefill + decode, settings.device)
        plan = disaggregated(settings.model_dir, groups,
                             prefill, decode, kind == "disagg-bidi", site,
                             "vllm" if toy else "advisor", runtime)
        return replace(plan, commands=[
            replace(c, argv=[settings.install.python, toy, *c.argv[2:]])
            if toy and c.role == "proxy" else c for c in plan.commands])
    groups = units(decode, settings.device)
    if kind == "render-split":
        return render_split(settings.model_dir, groups, None, None, site=site, runtime=runtime)
    return collocated(settings.model_dir, [u for g in groups for u in g], len(groups[0]),
                      site, runtime)


def port_of(command: Command) -> str:
    """The port a planned command serves on."""
    return command.argv[command.argv.index("--port") + 1]


def script(plan: DeployPlan) -> str:
    """`plan` as `advisor deploy --format shell` writes it, `advisor` run by this Python."""
    commands = [replace(c, argv=_here(c.argv)) for c in plan.commands]
    return as_shell(DeployCommands("", [], None, [replace(plan, commands=commands)], []))


def _here(argv: list[str]) -> list[str]:
    """`argv`, the project's own programs (advisor, `python -m engine...`) run by this
    Python."""
    if argv[0] == "advisor":
        return [sys.executable, "-m", "advisor.cli", *argv[1:]]
    if argv[0] == "python" and argv[1:2] == ["-m"] and argv[2].startswith("engine."):
        return [sys.executable, *argv[1:]]
    return argv


def free_base_port(tries: int = 50) -> int:
    """A base port whose whole layout (instances, front, side channels) is free on
    127.0.0.1."""
    offsets = (0, 1, 2, 3, PREFILL_OFFSET, PREFILL_OFFSET + 1, DECODE_OFFSET,
               DECODE_OFFSET + 1, PROXY_OFFSET, SIDE_OFFSET, SIDE_OFFSET + 1, RENDER_OFFSET)
    rng = random.Random()
    for _ in range(tries):
        base = rng.randrange(*_bases(), 1000)
        if ports_free([base + o for o in offsets]):
            return base
    raise OSError("no free port range for the vLLM instances")


def _bases() -> tuple[int, int]:
    """Where base ports are drawn: below the kernel's ephemeral ports, which outgoing
    connections take at random (one took a NIXL side channel's port between this check and
    its instance's start)."""
    try:
        low = int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return 10000, max(11000, low - 1000)


def ports_free(ports: list[int]) -> bool:
    """Whether each of `ports` can be bound on 127.0.0.1 now."""
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True
