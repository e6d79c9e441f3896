"""`advisor probe --transfer-check` against a live disaggregated deployment of the tiny model."""

import pytest

from advisor.probe.probe import transfer_check
from engine.processes.launch import Topology, launch

pytestmark = pytest.mark.integration  # starts servers or runs the CLI


@pytest.mark.parametrize("connector", ["shm"])
def test_transfer_check_reads_the_decoders_metrics(connector):
    with launch(Topology(mode="disagg", model="tiny", connector=connector, dtype="float32")) as d:
        r = transfer_check(d.url, [], prompts=3, tokens=200)
    assert r["transfers"] == 3 and r["failed_requests"] == 0
    assert 0 < r["mean_ms"] < 50 and r["verdict"] == "healthy"
    # tiny: 2 layers x 2 x 2 KV heads x 16 x 4 bytes = 512 B/token, 200 tokens
    assert r["mean_mb"] == pytest.approx(512 * 200 / 1e6)


@pytest.mark.slow  # a deployment of its own, ~5 s
def test_transfer_check_on_a_collocated_deployment_sees_no_transfers():
    with launch(Topology(mode="collocated", replicas=1, model="tiny", dtype="float32")) as d:
        r = transfer_check(d.url, [], prompts=1, tokens=50)
    assert r["transfers"] == 0 and "no KV transfer" in r["detail"]
