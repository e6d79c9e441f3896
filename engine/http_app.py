"""Running an aiohttp application until cancelled (engine servers and the proxy)."""

from __future__ import annotations

import asyncio

from aiohttp import web


async def run_app(app: web.Application, host: str, port: int, banner: str) -> None:
    """Serve `app` on host:port until cancelled. Handlers are cancelled when their
    client disconnects, which is what aborts an abandoned request."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"{banner} ready on http://{host}:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
