"""KV connectors against this machine's own baselines, measured in one run.

For KV payloads from 1 MB to 512 MB, prints each connector's pull throughput
as a fraction of a baseline moving the same bytes: a plain memcpy of the buffer
for `shm`, a raw socket pair on loopback for `tcp` (goal: >= 0.7 at 64 MB and
above). Then the decoder-side "ready" delay: last byte in -> the engine step
that computes on it (goal: < 5 ms).

Usage: python benchmarks/transfer_bench.py [--max-mb 512]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import threading
import time

import torch
from timing import best_of

from engine.core.config import EngineConfig
from engine.core.kv_layout import KVLayout
from engine.core.sequence import SamplingParams
from engine.kv import connectors, frame
from engine.kv.loopback import pull_seconds, shared_source
from engine.kv.source import KVSource
from engine.model.runner import build_engine
from engine.serve.async_engine import AsyncEngine

LAYOUT = KVLayout(num_layers=8, num_kv_heads=8, head_dim=128, dtype="float32")  # 64 KiB/token


def memcpy_time(nbytes: int) -> float:
    """Seconds for one copy of nbytes between two warm buffers."""
    src, dst = torch.empty(nbytes // 4).normal_(), torch.empty(nbytes // 4)
    return best_of(lambda: dst.copy_(src))


def socket_baseline(nbytes: int) -> float:
    """Seconds to move nbytes over a loopback TCP connection, sendall -> recv_into."""
    data = memoryview(bytearray(nbytes))
    sink = memoryview(bytearray(nbytes))
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def send():
        conn, _ = srv.accept()
        with conn:
            conn.recv(1)
            conn.sendall(data)

    times = []
    for _ in range(3):
        th = threading.Thread(target=send)
        th.start()
        with socket.create_connection(("127.0.0.1", port)) as c:
            t = time.perf_counter()
            c.sendall(b"x")
            frame.recv_into_exact(c, sink)
            times.append(time.perf_counter() - t)
        th.join()
    srv.close()
    return min(times)


def ready_delays(n: int = 20) -> list[float]:
    """Pull a prompt's KV from a prefill engine and time last byte -> first decode step."""
    prefill = build_engine(EngineConfig(model="tiny", role="prefill", kv_shared_memory=True))
    decode = AsyncEngine(build_engine(EngineConfig(model="tiny", role="decode")))
    source = KVSource(prefill.lend_kv, prefill.release_kv, prefill.runner.cache,
                      prefill.runner.layout)
    params = SamplingParams(max_tokens=2, temperature=0.0)
    delays = []

    async def run():
        for i in range(n):
            prompt = [3 + i, *list(range(10, 200))]
            rid = prefill.add_request(prompt, params)
            while prefill.has_unfinished():
                prefill.step()
            kv = source.transfer_params(rid, [])
            got = connectors.get("shm").pull(kv, decode.engine.runner.layout)
            async for out in decode.generate(prompt, params, f"d{i}", kv=got.payload):
                if out.first_scheduled_time is not None and len(delays) == i:
                    delays.append(out.first_scheduled_time - got.record.end)
            got.close()
            prefill.release_kv(rid)

    asyncio.run(run())
    decode.close()
    source.close()
    prefill.runner.cache.close()
    return delays


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--max-mb", type=int, default=512)
    args = ap.parse_args()
    torch.set_num_threads(1)
    sizes = [mb for mb in (1, 4, 16, 64, 128, 256, 512) if mb <= args.max_mb]
    print(
        f"{'MB':>5} | {'memcpy':>7} {'shm':>7} {'ratio':>5} | "
        f"{'socket':>7} {'tcp':>7} {'ratio':>5}   (GB/s)"
    )
    for mb in sizes:
        tokens = mb * (1 << 20) // LAYOUT.bytes_per_token
        nbytes = tokens * LAYOUT.bytes_per_token
        memcpy = memcpy_time(nbytes)
        source = shared_source(LAYOUT, tokens)
        shm, tcp = pull_seconds(source, "shm"), pull_seconds(source, "tcp")
        source.close()
        source.cache.close()
        sock = socket_baseline(nbytes)
        gbs = lambda s, n=nbytes: n / s / 1e9  # noqa: E731
        print(
            f"{mb:>5} | {gbs(memcpy):7.2f} {gbs(shm):7.2f} {memcpy / shm:5.2f} | "
            f"{gbs(sock):7.2f} {gbs(tcp):7.2f} {sock / tcp:5.2f}"
        )
    d = ready_delays()
    print(
        f"decoder ready delay after the last byte: median {statistics.median(d) * 1e3:.2f} ms, "
        f"max {max(d) * 1e3:.2f} ms over {len(d)} pulls (goal < 5 ms)"
    )


if __name__ == "__main__":
    main()
