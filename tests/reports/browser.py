"""Open a page in headless Chromium over the DevTools protocol and report what happened:
console errors, exceptions, dialogs, network requests, and the rendered size of each SVG."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import aiohttp

from engine.processes.children import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1200,900"]
SVG_BOXES = ("Array.from(document.querySelectorAll('figure svg')).map(e => {"
             "const r = e.getBoundingClientRect(); return [r.width, r.height]; })")


def inspect(url: str, screenshot: str, timeout_s: float = 60.0) -> dict:
    """Load `url`; save a full-page PNG to `screenshot`; return what the page did."""
    port = free_port()
    with tempfile.TemporaryDirectory() as profile:
        # its own process group: Chromium's helpers (renderer, GPU, zygote) are stopped with
        # it, so none is still writing the profile when it is removed (ENOTEMPTY). Its
        # TMPDIR is the profile too: it puts its singleton socket's directory there, and a
        # stopped Chromium left one in /tmp per run
        proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}",
                                 f"--remote-debugging-port={port}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, "TMPDIR": profile})
        try:
            ws_url = _page_ws(port, timeout_s)
            return asyncio.run(asyncio.wait_for(_drive(ws_url, url, screenshot), timeout_s))
        finally:
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the whole process group, SIGKILL it if it lingers, and wait for the leader."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    deadline = time.monotonic() + 5  # the helpers too: the group is empty when killpg fails
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _page_ws(port: int, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError("chromium's DevTools endpoint never came up")


async def _drive(ws_url: str, url: str, screenshot: str) -> dict:
    seen = {"console_errors": [], "exceptions": [], "dialogs": [], "requests": []}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(ws_url, max_msg_size=0) as ws,
    ):
        ids = iter(range(1, 10_000))
        pending: dict[int, asyncio.Future] = {}
        loaded = asyncio.Event()

        async def reader():
            async for msg in ws:
                m = json.loads(msg.data)
                if "id" in m and m["id"] in pending:
                    pending.pop(m["id"]).set_result(m.get("result", {}))
                    continue
                method, params = m.get("method"), m.get("params", {})
                if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                    seen["console_errors"].append(str(params.get("args")))
                elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                    seen["console_errors"].append(params["entry"].get("text"))
                elif method == "Runtime.exceptionThrown":
                    seen["exceptions"].append(str(params.get("exceptionDetails")))
                elif method == "Page.javascriptDialogOpening":
                    seen["dialogs"].append(params.get("message"))
                elif method == "Network.requestWillBeSent":
                    seen["requests"].append(params["request"]["url"])
                elif method == "Page.loadEventFired":
                    loaded.set()

        async def call(method: str, **params):
            i = next(ids)
            pending[i] = asyncio.get_running_loop().create_future()
            await ws.send_json({"id": i, "method": method, "params": params})
            return await pending[i]

        task = asyncio.create_task(reader())
        for domain in ("Runtime", "Log", "Network", "Page"):
            await call(f"{domain}.enable")
        await call("Page.navigate", url=url)
        await loaded.wait()
        await asyncio.sleep(0.5)
        boxes = await call("Runtime.evaluate", expression=SVG_BOXES, returnByValue=True)
        scripts = await call("Runtime.evaluate", returnByValue=True,
                             expression="document.querySelectorAll('script').length")
        shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        task.cancel()
    seen["svg_boxes"] = boxes["result"]["value"]
    seen["scripts"] = scripts["result"]["value"]
    return seen
