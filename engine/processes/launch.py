"""Start a topology as processes, wait for health, and always tear it down.

collocated: N `both` replicas behind a round-robin front; disagg: x prefillers +
y decoders behind the P/D proxy; render: one render-tier server (no model, W workers);
render-split: collocated engines fed token IDs by a render tier, behind a render front
(engine.fronts.render_front). Each
instance is pinned to its CPU cores (sched_setaffinity + its torch thread count)
or, on GPUs, to one device via CUDA_VISIBLE_DEVICES. The processes themselves (ports,
logs, health, teardown): engine.processes.children.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.core import deployment
from engine.core.config import API_KEY_ENV, DTYPES, load_model_config, max_body_bytes
from engine.processes.children import Process, free_port, spawn, stop, wait_healthy

MODES = ("collocated", "disagg", "render", "render-split")
# NOTE: instances and their KV side channels are reached only by the front on this host, so
# they bind loopback whatever --host says
INTERNAL_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Topology:
    """What to start. `cores`: CPU cores to share out, one slice per instance."""

    mode: str = "collocated"  # collocated | disagg | render | render-split
    replicas: int = 2  # collocated and render-split: engine replicas
    prefill: int = 1
    decode: int = 1
    model: str = "tiny"
    connector: str = "shm"
    dtype: str = "auto"  # resolved once by launch(), so every instance runs the same
    device: str = "cpu"
    port: int = 0  # the front's port; 0 picks a free one
    host: str = "127.0.0.1"
    cores: tuple[int, ...] | None = None  # default: all cores this process may use
    gpus: tuple[int, ...] | None = None
    max_num_batched_tokens: int = 2048
    kv_lease_duration: float = 30.0
    bidirectional: bool = False  # disagg: decoders keep turns, prefillers pull them back
    render_workers: int = 1  # render: processes behind its port (--renderer-num-workers)
    extra_args: tuple[str, ...] = ()
    # --chat-template / --reasoning-parser / --tool-call-parser: alike on every engine and render
    frontend_args: tuple[str, ...] = ()
    # NOTE: a secret: only the front checks it, handed over in its environment, never argv
    api_key: str | None = field(default=None, repr=False)
    # the deployment's own secret (engine.core.deployment; None: drawn at launch), and
    # whether its front serves only other processes of it (render-split's engines)
    secret: str | None = field(default=None, repr=False)
    internal: bool = False

    @property
    def max_body(self) -> int:
        """The largest request body its fronts take: what the model's context can need."""
        return max_body_bytes(load_model_config(self.model).max_position_embeddings)

    @property
    def num_instances(self) -> int:
        return {"collocated": self.replicas, "render-split": self.replicas, "render": 1}.get(
            self.mode, self.prefill + self.decode)

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if min(self.replicas, self.prefill, self.decode, self.render_workers) < 1:
            raise ValueError("replicas, prefill, decode and render workers must be >= 1")
        cores = self.cores or tuple(sorted(os.sched_getaffinity(0)))
        if self.device == "cpu" and self.num_instances > len(cores):
            raise ValueError(
                f"{self.num_instances} instances need {self.num_instances} cores; "
                f"this machine offers {len(cores)}"
            )
        if self.connector == "cuda" and not self.device.startswith("cuda"):
            raise ValueError("the cuda connector needs device cuda")

    def with_frontend(self, args: tuple[str, ...]) -> Topology:
        """This topology with front-end flags for every engine and render server."""
        return dataclasses.replace(self, frontend_args=args)

    def instance_device(self, i: int, env: dict[str, str]) -> str:
        """Instance i's --device, setting CUDA_VISIBLE_DEVICES in `env` where it pins one GPU."""
        if not self.device.startswith("cuda"):
            return self.device
        gpus = self.gpus or tuple(range(self.num_instances))
        gpu = gpus[i % len(gpus)]
        if self.connector == "cuda":  # NOTE: CUDA IPC needs both GPUs visible in both processes
            return f"cuda:{gpu}"
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        return "cuda:0"


@dataclass
class Child:
    """One started process and how to start it again (the supervisor restarts it)."""

    name: str  # its role and URL, for logs
    url: str  # where it answers /health
    args: list[str]
    cores: list[int] | None
    env: dict[str, str]
    proc: Process | None = None

    def start(self) -> Process:
        self.proc = spawn(self.args, self.cores, self.env)
        return self.proc


@dataclass
class Deployment:
    """A running topology: the URL clients use and each instance's URL."""

    url: str
    instance_urls: dict[str, list[str]]
    children: list[Child] = field(default_factory=list)
    secret: str | None = field(default=None, repr=False)  # its processes' shared secret

    @property
    def instance_key(self) -> str | None:
        """The bearer key its instances' HTTP ports require (None: they require none)."""
        return deployment.instance_key(bytes.fromhex(self.secret)) if self.secret else None

    @property
    def processes(self) -> list[Process]:
        """The children's current processes: instances in start order, then the front
        (render-split: then the render tier and the render front)."""
        return [c.proc for c in self.children if c.proc is not None]


@contextlib.contextmanager
def serve_module(
    module: str,
    args: list[str],
    host: str = "127.0.0.1",
    cores: list[int] | None = None,
    health_timeout: float = 60.0,
    port: int = 0,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Run `python -m module --host H --port P *args` (P: `port`, else a free one) in `env`
    (default: this process's), yield its URL once healthy, stop it."""
    child = _module_child(module, module, host, port or free_port(host),
                          dict(os.environ) if env is None else env, args, cores)
    proc = child.start()
    try:
        wait_healthy(child.url, proc, health_timeout)
        yield child.url
    finally:
        stop([proc])


def _module_child(role: str, module: str, host: str, port: int, env: dict[str, str],
                  args: list[str], cores: list[int] | None = None) -> Child:
    """A child running `python -m module --host H --port P *args`, not started yet."""
    url = f"http://{host}:{port}"
    return Child(f"{role} {url}", url, ["-m", module, "--host", host, "--port", str(port), *args],
                 cores, env)


@contextlib.contextmanager
def _render_split(t: Topology, health_timeout: float) -> Iterator[Deployment]:
    """The engines (collocated) and the render tier on loopback, a render front before them;
    the tier and the front are children too, so a supervisor restarts them as it does
    the engines. The render tier shares the engines' cores here; on a GPU host it would take
    CPU from the host's other work, which is what splitting it off elsewhere frees."""
    secret = t.secret or deployment.new()
    inside: dict[str, Any] = {"host": INTERNAL_HOST, "port": 0, "api_key": None, "secret": secret,
              "internal": True}
    with launch(dataclasses.replace(t, mode="collocated", **inside), health_timeout) as engines:
        tier = _module_child("render", "engine.fronts.render_server", INTERNAL_HOST,
                             free_port(INTERNAL_HOST), _internal_env(secret), _render_args(t))
        front = _module_child("render front", "engine.fronts.render_front", t.host,
                              t.port or free_port(t.host), _front_env(t, secret),
                              ["--render", tier.url, "--engine", engines.url,
                               "--max-body-bytes", str(t.max_body)])
        try:
            for child in (tier, front):
                wait_healthy(child.url, child.start(), health_timeout, bytes.fromhex(secret))
            yield Deployment(front.url, {**engines.instance_urls, "render": [tier.url]},
                             [*engines.children, tier, front], secret)
        finally:
            stop([c.proc for c in (tier, front) if c.proc is not None])


def _render_args(t: Topology) -> list[str]:
    """The render server's flags for `t` (its port and host apart)."""
    return ["--model", t.model, "--workers", str(t.render_workers), *t.frontend_args]


def _internal_env(secret: str | None) -> dict[str, str]:
    """An instance's environment: this process's, without an API key (only the front checks
    one), with the deployment's secret (engine.core.deployment) where it has one."""
    env = {k: v for k, v in os.environ.items()
           if k not in (API_KEY_ENV, deployment.SECRET_ENV)}
    return {**env, deployment.SECRET_ENV: secret} if secret else env


def _front_env(t: Topology, secret: str | None) -> dict[str, str]:
    return {**_internal_env(secret), **({API_KEY_ENV: t.api_key} if t.api_key else {})}


def _instance_args(t: Topology, role: str, port: int, device: str) -> list[str]:
    return ["-m", "engine.serve.server", "--model", t.model, "--role", role,
            "--host", INTERNAL_HOST, "--port", str(port), "--connector", t.connector,
            "--dtype", t.dtype, "--device", device, "--num-threads", "1",
            "--max-num-batched-tokens", str(t.max_num_batched_tokens),
            "--kv-lease-duration", str(t.kv_lease_duration), *t.frontend_args, *t.extra_args,
            *(["--keep-conversations"] if t.bidirectional and role == "decode" else [])]


@contextlib.contextmanager
def launch(t: Topology, health_timeout: float = 120.0) -> Iterator[Deployment]:
    """Start `t`, yield its Deployment once every process is healthy, stop all on exit."""
    t.validate()
    if t.mode != "render" and t.dtype == "auto":  # NOTE: decided once: P and D must agree
        from engine.model.dtype import resolve  # here: the launcher itself needs no torch

        t = dataclasses.replace(t, dtype=resolve(t.dtype, t.device).dtype)
    if t.mode == "render-split":
        with _render_split(t, health_timeout) as dep:
            yield dep
        return
    if t.mode == "render":
        with serve_module(
            "engine.fronts.render_server",
            _render_args(t),
            t.host,
            health_timeout=health_timeout,
            port=t.port,
            env=_front_env(t, None),  # a render tier alone is a front: no secret
        ) as url:
            yield Deployment(url, {"render": [url]})
        return
    secret = t.secret or deployment.new()
    cores = list(t.cores or sorted(os.sched_getaffinity(0)))
    roles = (
        ["both"] * t.replicas
        if t.mode == "collocated"
        else ["prefill"] * t.prefill + ["decode"] * t.decode
    )
    children: list[Child] = []
    procs: list[Process] = []
    urls: dict[str, list[str]] = {"both": [], "prefill": [], "decode": []}
    try:
        share = max(1, len(cores) // len(roles))
        for i, role in enumerate(roles):
            env = _internal_env(secret)
            mine = None
            device = t.instance_device(i, env)
            if device == "cpu":
                mine = cores[i * share : (i + 1) * share] or [cores[i % len(cores)]]
                env["OMP_NUM_THREADS"] = "1"
            port = free_port(INTERNAL_HOST)
            url = f"http://{INTERNAL_HOST}:{port}"
            children.append(Child(f"{role} {url}", url, _instance_args(t, role, port, device),
                                  mine, env))
            procs.append(children[-1].start())
            urls[role].append(url)
        for c, proc in zip(children, procs):
            wait_healthy(c.url, proc, health_timeout, bytes.fromhex(secret))
        port = t.port or free_port(t.host)
        front = [
            "-m",
            "engine.fronts.proxy",
            "--host",
            t.host,
            "--port",
            str(port),
            "--decode",
            *(urls["both"] or urls["decode"]),
        ]
        if urls["prefill"]:
            front += ["--prefill", *urls["prefill"], *(["--bidirectional"] * t.bidirectional)]
        front += ["--internal"] * t.internal + ["--max-body-bytes", str(t.max_body)]
        url = f"http://{t.host}:{port}"
        children.append(Child(f"front {url}", url, front, None, _front_env(t, secret)))
        wait_healthy(url, children[-1].start(), health_timeout, bytes.fromhex(secret))
        yield Deployment(url, {k: v for k, v in urls.items() if v}, children, secret)
    finally:
        stop([c.proc for c in children if c.proc is not None])
