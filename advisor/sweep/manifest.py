"""A sweep's manifest: versions, config and seed, what probe finds on this host (GPUs, the
P2P matrix, measured links) and the dtype that runs; apart from the evidence, so that what
reads run directories never loads the torch that measuring the links needs."""

from __future__ import annotations

import dataclasses

from advisor.probe import hardware, p2p
from advisor.rundata.files import manifest
from engine import api
from engine.api import DtypeChoice

ELSEWHERE = ("not measured: the deployments' KV crosses their own links, not this host's "
             "(their transfers come from the decoders' metrics)")


def sweep_manifest(opts, argv: list[str] | None, dtype: DtypeChoice) -> dict:
    """The run's manifest, with what probe finds on this host and the dtype that runs; this
    host's KV links only where the bundled engine's KV crosses them."""
    gpus, note = hardware.inventory()
    matrix, source = p2p.read(opts.p2p_matrix) if opts.p2p_matrix or gpus else (None, None)
    probe = {"gpus": hardware.gpus_json(gpus), "gpu_note": note,
             "p2p": matrix.to_json() if matrix else None, "p2p_source": source, "links": None,
             "links_note": ELSEWHERE}
    if opts.bundled:
        probe.update(links=api.host_links(16 << 20), links_note=None)
    config = {k: v for k, v in dataclasses.asdict(opts).items() if k != "api_key"}
    ran = {"asked": opts.dtype, "ran": dtype.dtype, "reason": dtype.reason,
           "matmul_gflops": dtype.gflops}
    return {**manifest(opts.seed, config, argv), "probe": probe, "dtype": ran}
