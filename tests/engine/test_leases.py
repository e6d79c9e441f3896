"""KVLeases: a lease being read (blocks going out over tcp/shm) can neither expire nor be
released under its reader; once the read ends, either frees the blocks exactly once."""

import threading

import pytest

from engine.core.leases import KVLeases
from engine.core.sequence import Request, SamplingParams


def _held(duration=10.0):
    freed = []
    leases = KVLeases(duration, freed.append)
    req = Request("r1", [1, 2, 3], SamplingParams(max_tokens=1))
    leases.hold(req)
    return leases, req, freed


def test_a_read_in_progress_pins_the_blocks_against_expiry_and_release():
    leases, req, freed = _held(duration=0.0)
    with leases.reading("r1") as got:
        assert got is req
        assert leases.expire() == [] and not leases.release("r1")
        assert "r1" in leases and freed == []
    assert leases.expire() == ["r1"] and freed == [req]
    assert not leases.release("r1") and freed == [req]  # once only
    with pytest.raises(KeyError, match="no KV held"):
        leases.lend("r1")


def test_lending_renews_the_lease_and_concurrent_releases_free_once():
    leases, req, freed = _held(duration=30.0)
    before = leases.expires_at("r1")
    leases.lend("r1")
    assert leases.expires_at("r1") >= before
    assert leases.expire(now=before - 1) == []
    results = []
    threads = [threading.Thread(target=lambda: results.append(leases.release("r1")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1 and freed == [req]
