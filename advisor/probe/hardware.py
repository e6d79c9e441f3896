"""What this host computes with: nvidia-smi's GPU inventory and torch's view of it, and the
CPU's vector units with the matmul rate torch gets from them in each dtype."""

from __future__ import annotations

import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from advisor.rundata.manifest import GpuFound, cpu_model
from engine import api

# The flags that decide whether bfloat16 is fast on a CPU (AMX and AVX-512-BF16) or emulated.
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16")

QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,pci.bus_id", "--format=csv,noheader"]


@dataclass
class GPU:
    index: int
    name: str
    memory_total: str
    pci_bus_id: str


def parse_inventory(text: str) -> list[GPU]:
    """nvidia-smi's CSV (no header) -> GPUs; ValueError on a malformed line."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].isdigit():
            raise ValueError(f"unexpected nvidia-smi line {line!r}")
        gpus.append(GPU(int(parts[0]), parts[1], parts[2], parts[3]))
    return gpus


def inventory(timeout_s: float = 10.0) -> tuple[list[GPU], str | None]:
    """(GPUs, None) or ([], why there are none: no nvidia-smi, or its error)."""
    try:
        out = subprocess.run(QUERY, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return [], "no nvidia-smi on this machine: no NVIDIA GPU to use"
    except (OSError, subprocess.SubprocessError) as e:
        return [], f"nvidia-smi failed: {e}"
    if out.returncode != 0:
        return [], f"nvidia-smi failed: {(out.stderr or out.stdout).strip()[:300]}"
    try:
        return parse_inventory(out.stdout), None
    except ValueError as e:
        return [], str(e)


def torch_view() -> dict[str, Any]:
    """torch's CUDA view: availability, device count, and the peer-access matrix."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    peer = [[i == j or torch.cuda.can_device_access_peer(i, j) for j in range(n)] for i in range(n)]
    return {"cuda_available": n > 0, "device_count": n, "can_device_access_peer": peer,
            "torch_version": torch.__version__}


def gpus_json(gpus: list[GPU]) -> list[dict[str, Any]]:
    return [asdict(g) for g in gpus]


def gpus_found(gpus: list[GPU]) -> list[GpuFound]:
    """`gpus` as a manifest records them."""
    return [GpuFound(g.index, g.name, g.memory_total, g.pci_bus_id) for g in gpus]


def cpu_flags(cpuinfo: str | None = None) -> list[str]:
    """Which of VECTOR_FLAGS this CPU has (from /proc/cpuinfo, or the text given)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    line = next((x for x in cpuinfo.splitlines() if x.startswith("flags")), "")
    have = set(line.partition(":")[2].split())
    return [f for f in VECTOR_FLAGS if f in have]


def cpu_view() -> dict[str, Any]:
    """The CPU, its vector flags, torch's matmul rate per dtype (one thread) and the dtype
    that `auto` picks here, with why."""
    rates = api.best_rates(("float32", "bfloat16", "float16"))
    choice = api.choose_cpu(rates.__getitem__)
    return {"model": cpu_model(), "vector_flags": cpu_flags(), "matmul_gflops": rates,
            "auto_dtype": choice.dtype, "auto_reason": choice.reason}
