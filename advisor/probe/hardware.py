"""What accelerators this host has: nvidia-smi's inventory and torch's view of them."""

from __future__ import annotations

import subprocess
from dataclasses import asdict, dataclass

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


def torch_view() -> dict:
    """torch's CUDA view: availability, device count, and the peer-access matrix."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    peer = [[i == j or torch.cuda.can_device_access_peer(i, j) for j in range(n)] for i in range(n)]
    return {"cuda_available": n > 0, "device_count": n, "can_device_access_peer": peer,
            "torch_version": torch.__version__}


def gpus_json(gpus: list[GPU]) -> list[dict]:
    return [asdict(g) for g in gpus]
