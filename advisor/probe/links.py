"""KV links by rate, latency and per-transfer overhead, each with where its figures come
from: the planner's link table, and what a prompt's KV takes without GPU peer-to-peer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """A KV transfer over it lasts latency + overhead + bytes / rate; transfers into one
    decoder share it (one at a time)."""

    name: str
    gbps: float  # GB/s the transfer reaches, one direction
    latency_ms: float
    overhead_ms: float  # per transfer, beside the wire (registration, notification)
    source: str

    def seconds(self, nbytes: float) -> float:
        return (self.latency_ms + self.overhead_ms) / 1000 + nbytes / (self.gbps * 1e9)


# Peer-to-peer (or RDMA) rates: about 80% of the nominal, as copies reach.
LINKS = {k.name: k for k in (
    Link("pcie4", 25, 0.01, 1.0, "PCIe 4 x16: 32 GB/s nominal, ~25 GB/s reached by P2P copies"),
    Link("pcie5", 50, 0.01, 1.0, "PCIe 5 x16: 64 GB/s nominal, ~50 GB/s reached"),
    Link("nvlink", 300, 0.005, 0.5, "NVLink 4: 450 GB/s per direction nominal, ~300 reached"),
    Link("infinity-fabric", 51, 0.005, 0.5, "one AMD Infinity Fabric link between two "
         "MI300X: 64 GB/s per direction nominal, ~80% reached"),
    Link("rdma-100g", 11, 0.005, 1.0, "100 Gb/s RDMA: 12.5 GB/s line rate"),
    Link("rdma-400g", 45, 0.005, 1.0, "400 Gb/s RDMA: 50 GB/s line rate"),
    Link("tcp-25g", 2.5, 0.05, 2.0, "25 Gb/s TCP: 3.1 GB/s line rate, ~80% reached"),
)}
# NOTE: without GPU peer-to-peer, KV is staged through the host: this is the effective
# rate the guide measured there (~470 MB in ~1.3 s, two L40S), the one figure of its case
# the planner takes.
HOST_STAGED = Link("host-staged", 0.470 / 1.3, 0.05, 0.0,
                   "host-staged NIXL path without P2P: the guide's ~1.3 s for ~470 MB")
