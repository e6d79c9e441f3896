"""Running an aiohttp application until cancelled (engine servers and the proxy)."""

from __future__ import annotations

import asyncio
import gc
import signal

from aiohttp import web


async def run_app(app: web.Application, host: str, port: int, banner: str) -> None:
    """Serve `app` on host:port until cancelled or sent SIGTERM. Handlers are cancelled when their
    client disconnects, which is what aborts an abandoned request."""
    # NOTE: a full collection over what torch and the model leave behind takes ~150 ms
    # (measured with `small`), an ITL spike to any request in flight; freezing the
    # startup objects makes later collections cheap, as vLLM does after init.
    gc.collect()
    gc.freeze()
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"{banner} ready on http://{host}:{port}", flush=True)
    # NOTE: SIGTERM (the launcher's stop) ends the server like Ctrl-C: the app's cleanup
    # runs, so a prefiller unlinks its shared-memory KV cache itself
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    try:
        await stopped.wait()
    finally:
        await runner.cleanup()
