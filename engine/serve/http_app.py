"""Running an aiohttp application until cancelled (engine servers and the proxy)."""

from __future__ import annotations

import asyncio
import gc

from aiohttp import web


async def run_app(app: web.Application, host: str, port: int, banner: str) -> None:
    """Serve `app` on host:port until cancelled. Handlers are cancelled when their
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
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
