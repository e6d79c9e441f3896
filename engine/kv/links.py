"""Link specs: named links and rates ('400Gbps', '25GBps'), and emulated slow links."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Named links, in bytes per second (nominal, one direction).
LINKS = {
    "pcie3": 16e9, "pcie4": 32e9, "pcie5": 64e9,  # x16
    "nvlink3": 300e9, "nvlink4": 450e9,  # per direction, all links of one GPU
    "100gbe": 12.5e9, "ib-hdr": 25e9, "ib-ndr": 50e9,
}
_RATE = re.compile(r"^\s*([0-9.]+)\s*([kKmMgGtT]?)([bB])(ps|/s)\s*$")
_UNIT = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_link(spec: str) -> float:
    """'400Gbps' (bits), '25GBps' (bytes), or a name in LINKS -> bytes per second."""
    if spec.lower() in LINKS:
        return LINKS[spec.lower()]
    m = _RATE.match(spec)
    if not m or not 0 < float(m.group(1)) < math.inf:
        raise ValueError(f"--link {spec!r}: expected e.g. 400Gbps, 25GBps, or one of "
                         f"{', '.join(LINKS)}")
    per_s = float(m.group(1)) * _UNIT[m.group(2).lower()]
    return per_s if m.group(3) == "B" else per_s / 8


_DURATION = re.compile(r"^\s*([0-9.]+)\s*(ms|s)\s*$")


@dataclass(frozen=True)
class LinkEmulation:
    """A slower link imposed on KV transfers: a fixed time per transfer, or a bandwidth."""

    spec: str
    seconds: float = 0.0
    bytes_per_s: float | None = None

    def transfer_seconds(self, nbytes: int) -> float:
        """How long a transfer of nbytes takes on the emulated link."""
        return self.seconds if self.bytes_per_s is None else nbytes / self.bytes_per_s


def parse_emulation(spec: str) -> LinkEmulation:
    """'1.3s' / '800ms' (per transfer) or a rate like '1GBps' (bytes / rate per transfer)."""
    m = _DURATION.match(spec)
    if m:
        seconds = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
        return LinkEmulation(spec, seconds=seconds)
    try:
        return LinkEmulation(spec, bytes_per_s=parse_link(spec))
    except ValueError:
        raise ValueError(f"link emulation {spec!r}: expected a time per transfer (1.3s, 800ms) "
                         "or a rate (1GBps, 10Gbps)") from None
