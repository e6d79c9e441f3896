"""Connectors, through the KVConnector interface, parametrised over every implementation:
the same bytes as the engine's own export, headers validated, link emulation as a wrapper;
and the cuda connector's GPU-free parts (handle encoding, routing, staged copies)."""

import asyncio
import time

import pytest
import torch

from engine.core.config import EngineConfig
from engine.core.sequence import SamplingParams
from engine.kv import buffers, connector, connectors, frame
from engine.kv.connector import KVConnector
from engine.kv.connectors import cuda
from engine.kv.emulated import EmulatedLink
from engine.kv.links import parse_emulation
from engine.kv.source import KVSource
from engine.model.runner import build_engine

pytestmark = pytest.mark.integration  # starts servers or runs the CLI

ON_THIS_HOST = [pytest.param(n, marks=pytest.mark.skipif(
    n == "cuda" and not torch.cuda.is_available(), reason="needs a GPU")) for n in connectors.NAMES]


def _prefilled(device="cpu"):
    """A prefill engine holding one request's KV (shared memory on a CPU), its side channel."""
    eng = build_engine(EngineConfig(model="tiny", role="prefill", block_size=8, device=device,
                                    kv_shared_memory=device == "cpu"))
    prompt = list(range(5, 60))  # 55 tokens: 7 blocks, the last partly filled
    rid = eng.add_request(prompt, SamplingParams(max_tokens=1, temperature=0.0),
                          remote_decode=True)
    while eng.has_unfinished():
        eng.step()
    return eng, KVSource(eng.lend_kv, eng.release_kv, eng.runner.cache, eng.runner.layout), rid


@pytest.fixture
def prefilled():
    eng, source, rid = _prefilled()
    yield eng, source, rid
    source.close()
    eng.runner.cache.close()


def test_each_file_under_connectors_is_one_connector_by_that_name():
    assert set(connectors.NAMES) == {"cuda", "shm", "tcp"}
    for name in connectors.NAMES:
        c = connectors.get(name)
        assert isinstance(c, KVConnector) and c.name == name
    with pytest.raises(ValueError, match="connector must be one of cuda, shm, tcp"):
        connectors.get("nixl")


@pytest.mark.parametrize("name", ON_THIS_HOST)
def test_pulled_kv_equals_the_engines_export(name):
    eng, source, rid = _prefilled("cuda" if name == "cuda" else "cpu")
    try:
        params = source.transfer_params(rid, [])
        for _ in range(2):  # the second pull reuses the pooled buffer and the mapping
            got = connectors.get(name).pull(params, eng.runner.layout, eng.runner.device)
            expected = eng.export_kv(rid)
            assert got.payload.token_ids == expected.token_ids
            assert torch.equal(got.payload.kv.to(expected.kv.device), expected.kv)
            assert got.record.nbytes == expected.nbytes == eng.runner.layout.bytes_per_token * 55
            assert got.record.connector == name and got.record.emulated is None
            got.close()
    finally:
        source.close()
        eng.runner.cache.close()


@pytest.mark.parametrize("have,start", [(16, 16), (21, 16), (200, 48)])
@pytest.mark.parametrize("name", ["shm", "tcp"])
def test_a_puller_holding_a_prefix_gets_only_the_rest_from_a_whole_block(name, prefilled,
                                                                         have, start):
    eng, source, rid = prefilled  # 55 tokens in blocks of 8
    expected = eng.export_kv(rid)
    got = connectors.get(name).pull(source.transfer_params(rid, []), eng.runner.layout,
                                    eng.runner.device, have=have)
    assert got.payload.start == start and got.payload.token_ids == expected.token_ids
    assert torch.equal(got.payload.kv, expected.kv[:, :, start:])
    assert got.record.nbytes == eng.runner.layout.bytes_per_token * (55 - start)
    got.payload.check_compatible(eng.runner.layout, expected.token_ids)
    assert torch.equal(got.payload.prefix(50).kv, expected.kv[:, :, start:50])
    got.close()


@pytest.mark.parametrize("name", ON_THIS_HOST)
def test_an_emulated_link_wraps_any_connector_and_only_stretches_its_time(name, prefilled):
    eng, source, rid = prefilled
    if name == "cuda":
        pytest.skip("the CPU fixture's cache is not on a GPU")
    link = connectors.get(name, parse_emulation("300ms"))
    assert isinstance(link, EmulatedLink) and link.name == name
    t = time.monotonic()
    got = asyncio.run(link.pull_async(source.transfer_params(rid, []), eng.runner.layout,
                                      eng.runner.device))
    assert time.monotonic() - t >= 0.3 and got.record.seconds >= 0.3
    assert got.record.emulated == "300ms" and got.record.connector == name
    assert torch.equal(got.payload.kv, eng.export_kv(rid).kv)
    got.close()


@pytest.mark.parametrize("name,refusal", [("shm", "not in shared memory"), ("cuda", "not on a GPU"),
                                          ("tcp", None)])
def test_a_connector_refuses_a_cache_it_cannot_serve(name, refusal):
    eng = build_engine(EngineConfig(model="tiny", role="prefill"))  # a private CPU cache
    rid = eng.add_request([3, 4, 5], SamplingParams(max_tokens=1), remote_decode=True)
    while eng.has_unfinished():
        eng.step()
    source = KVSource(eng.lend_kv, eng.release_kv, eng.runner.cache, eng.runner.layout)
    try:
        pull = connectors.get(name).pull
        if refusal is None:
            pull(source.transfer_params(rid, []), eng.runner.layout).close()
        else:
            with pytest.raises(frame.FrameError, match=refusal):
                pull(source.transfer_params(rid, []), eng.runner.layout)
    finally:
        source.close()


@pytest.mark.parametrize("bad", [
    {"block_ids": [0, 1]},                        # too few blocks for 20 tokens of block 8
    {"block_ids": [0, 1, 999]},                   # out of the cache
    {"block_ids": [0, 1, "2"]},                   # not integers
    {"cache_shape": [2, 2, 10, 8, 2]},            # wrong rank
    {"cache_shape": [3, 2, 10, 8, 2, 16]},        # layers differ from the KV's
])
def test_block_headers_that_do_not_fit_their_cache_are_rejected(bad):
    header = {"block_ids": [0, 1, 2], "cache_shape": [2, 2, 10, 8, 2, 16], **bad}
    with pytest.raises(frame.FrameError):
        frame.check_block_header(header, (2, 2, 20, 2, 16))


def test_buffer_pool_reuses_by_size_class_and_bounds_what_it_keeps():
    pool = buffers.BufferPool(max_free_bytes=3 << 20)
    a = pool.take(1500 * 1024)
    assert a.numel() == buffers.size_class(1500 * 1024) == 2 << 20
    pool.give(a)
    assert pool.take(2 << 20).data_ptr() == a.data_ptr()  # same bucket: reused
    pool.give(a)
    pool.give(torch.empty(2 << 20, dtype=torch.uint8))  # would exceed 3 MiB: dropped
    assert pool.free_bytes == 2 << 20


def test_cuda_routes_follow_peer_access():
    gpu0, gpu1 = torch.device("cuda", 0), torch.device("cuda", 1)
    asked = []

    def peer(a, b):
        asked.append((a, b))
        return a + b == 1

    assert cuda.route(gpu0, gpu0, peer) == "same-device"
    assert cuda.route(gpu0, gpu1, peer) == "peer"
    assert asked == [(1, 0)]  # can the destination reach the source
    assert cuda.route(gpu0, gpu1, lambda a, b: False) == "staged"
    assert cuda.route(gpu0, torch.device("cpu"), peer) == "staged"


def test_cuda_staged_copy_goes_through_the_pool_and_keeps_the_values():
    pool = buffers.BufferPool()
    kv = torch.randn(2, 2, 9, 2, 16)
    out = cuda.move(kv, torch.device("cpu"), "staged", pool)
    assert torch.equal(out, kv)
    assert pool.free_bytes > 0  # the staging buffer went back
    out.zero_()  # the result must not alias the staging buffer, which still holds kv
    nbytes = kv.numel() * kv.element_size()
    staged = pool.take(nbytes)[:nbytes].view(kv.dtype).view(kv.shape)
    assert torch.equal(staged, kv)


def test_cuda_handle_description_round_trips_through_json():
    import json

    args = (torch.Tensor, torch.Size([2, 2, 4, 8, 2, 16]), (1024, 512, 128, 32, 16, 1), 0,
            torch.storage.TypedStorage, torch.bfloat16, 1, b"\x01\xffhandle", 4096, 0, False,
            b"rc\x00", 64, b"\x00ev", True)
    desc = json.loads(json.dumps(cuda.describe(args)))
    assert desc["dtype"] == "bfloat16" and desc["device"] == 1
    back = cuda.rebuild_args(desc)
    assert back[1:4] == args[1:4] and back[5:10] == args[5:10] and back[11:] == args[11:]


def test_scatter_gather_send_survives_partial_writes():
    import socket
    import threading

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # force many partial sendmsg calls
    rng = torch.Generator().manual_seed(0)
    parts = [torch.randint(0, 256, (int(n),), dtype=torch.uint8, generator=rng)
             for n in torch.randint(1, 70_000, (1500,), generator=rng)]  # > IOV_MAX buffers
    expected = torch.cat(parts).numpy().tobytes()
    got = bytearray(len(expected))
    reader = threading.Thread(target=frame.recv_into_exact, args=(b, memoryview(got)))
    reader.start()
    frame.send_views(a, [memoryview(p.numpy()) for p in parts])
    reader.join(30)
    a.close()
    b.close()
    assert bytes(got) == expected


def test_launcher_gives_each_instance_its_gpu_and_keeps_both_visible_for_cuda_ipc():
    from engine.processes.launch import Topology

    ipc = Topology(mode="disagg", device="cuda", connector="cuda")
    env: dict = {}
    assert [ipc.instance_device(i, env) for i in range(2)] == ["cuda:0", "cuda:1"]
    assert "CUDA_VISIBLE_DEVICES" not in env  # IPC must see both GPUs
    pinned = Topology(mode="disagg", device="cuda", connector="shm")
    env = {}
    assert pinned.instance_device(1, env) == "cuda:0" and env["CUDA_VISIBLE_DEVICES"] == "1"
    shared = Topology(mode="disagg", device="cuda", connector="cuda", gpus=(0,))
    assert [shared.instance_device(i, {}) for i in range(2)] == ["cuda:0", "cuda:0"]
    with pytest.raises(ValueError, match="needs device cuda"):
        Topology(mode="disagg", connector="cuda").validate()


def _rss_bytes() -> int:
    import os

    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_the_side_channel_bounds_what_a_peer_can_make_it_hold(prefilled, monkeypatch):
    """Peers that announce 16 MiB headers and send nothing cost neither memory nor threads
    for long: request frames are small, silent peers time out, connections are capped."""
    import socket
    import struct

    from engine.kv import source as source_mod

    monkeypatch.setattr(source_mod, "REQUEST_DEADLINE_S", 0.5)
    eng, source, rid = prefilled
    before = _rss_bytes()
    announce = struct.pack("!4sHI", frame.MAGIC, frame.VERSION, 16 << 20)
    socks = []
    for _ in range(100):
        s = socket.create_connection((source.host, source.port), timeout=5)
        s.sendall(announce)
        socks.append(s)
    answers = [frame.read(s) for s in socks[:10]]
    assert all("exceeds the limit" in a["error"] for a in answers)
    assert _rss_bytes() - before < 64 << 20  # 100 x 16 MiB would be 1.6 GiB
    for s in socks:
        s.close()
    silent = socket.create_connection((source.host, source.port))
    silent.settimeout(5)
    assert "too slow" in frame.read(silent)["error"]  # dropped at its deadline, not held
    silent.close()
    # and it still serves a real pull
    got = connectors.get("tcp").pull(source.transfer_params(rid, []), eng.runner.layout)
    assert torch.equal(got.payload.kv, eng.export_kv(rid).kv)
    got.close()


def test_a_decoder_refuses_kv_for_other_tokens_before_allocating_it(prefilled):
    eng, source, rid = prefilled
    with pytest.raises(frame.FrameError, match="other tokens"):
        connectors.get("tcp").pull(source.transfer_params(rid, []), eng.runner.layout,
                                   prompt=[1, 2, 3])


def test_only_the_holder_of_a_requests_token_may_pull_or_release_it(prefilled):
    eng, source, rid = prefilled
    params = source.transfer_params(rid, [])
    for forged in ({**params, "remote_request_token": "0" * 64},
                   {k: v for k, v in params.items() if k != "remote_request_token"}):
        with pytest.raises(frame.FrameError, match="not authorized"):
            connectors.get("tcp").pull(forged, eng.runner.layout)
        connector.release(forged)  # best effort: refused, quietly
        assert rid in eng.held  # still held
    got = connectors.get("tcp").pull(params, eng.runner.layout)
    got.close()
    connector.release(params)
    assert rid not in eng.held
