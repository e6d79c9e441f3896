"""A decode leg's KV: pulled from its prefiller before the request runs, reported and
freed after, on every way out of the request."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from engine.core import deployment
from engine.core.llm_engine import RequestOutput
from engine.kv import connector
from engine.kv.connector import KVConnector
from engine.kv.frame import ForeignKV, FrameError
from engine.render.protocol import RequestError
from engine.serve.metrics import EngineMetrics
from engine.serve.responses import RequestContext

if TYPE_CHECKING:  # torch's: the server has loaded it; this module need not
    from engine.kv.connector import PulledKV
    from engine.model.runner import ModelRunner


class DecodeLegs:
    """The pull side of P/D on a decoder: which prefillers it may pull from, how a pull
    that fails is answered, and when the prefiller's blocks go."""

    def __init__(self, kv_connector: KVConnector, runner: ModelRunner, metrics: EngineMetrics,
                 pull_hosts: tuple[str, ...], failure_policy: str,
                 deployment_secret: bytes | None = None) -> None:
        self.connector, self.runner, self.metrics = kv_connector, runner, metrics
        self.pull_hosts = pull_hosts  # the side channels a decoder may pull from
        self.failure_policy = failure_policy  # "fail": a failed pull fails the request
        self.secret = deployment_secret  # inside a deployment: pull only what it signed

    def _trusted(self, kv: dict[str, Any]) -> None:
        """ValueError unless `kv` may be pulled: well formed, from a host allowed, and
        inside a deployment signed by it (a client cannot name where KV comes from)."""
        connector.check_params(kv, self.pull_hosts)
        if self.secret is not None and not deployment.verify(self.secret, kv):
            raise ValueError("they are not signed by this deployment (or expired)")

    async def pull(self, kv: dict[str, Any], prompt: list[int]) -> PulledKV | None:
        """The KV that `kv` (kv_transfer_params) names for `prompt`, pulled; None where the
        policy recomputes after a failed pull. Raises RequestError for parameters that
        name another host or request, or a failed pull under the "fail" policy."""
        try:
            self._trusted(kv)
        except ValueError as e:
            raise RequestError(f"kv_transfer_params: {e}", "kv_transfer_params") from None
        try:
            return await self.connector.pull_async(kv, self.runner.layout, self.runner.device,
                                                   prompt)
        except ForeignKV as e:  # its kv_transfer_params name another request's KV
            raise RequestError(str(e), "kv_transfer_params") from None
        except asyncio.CancelledError:  # the client left mid-pull: free the prefiller now
            release_soon(kv)
            raise
        except (FrameError, OSError, ValueError) as e:
            self.metrics.kv_failures.inc()
            release_soon(kv)
            if self.failure_policy == "fail":
                raise RequestError(f"KV transfer failed: {e}", status=500,
                                   err_type="kv_transfer_error") from None
            return None

    def refused(self, body: dict[str, Any] | None) -> None:
        """A decode leg refused before its pull (it asks past the context, say): the KV its
        prefill left held is freed now, not at the lease's end. Only its token's holder
        can release it, so a client naming other parameters frees nothing."""
        kv = body.get("kv_transfer_params") if isinstance(body, dict) else None
        if not isinstance(kv, dict) or not connector.can_pull(kv):
            return
        try:
            self._trusted(kv)
        except ValueError:
            return
        release_soon(kv)

    def done(self, ctx: RequestContext, out: RequestOutput | None = None) -> None:
        """Close the request's pulled KV (imported when `out`, its first output, came),
        record the transfer, and free the prefiller's blocks; once per request."""
        if ctx.pulled is None:
            return
        rec = ctx.pulled.record
        ctx.pulled.close(imported=out is not None)
        ctx.pulled = None
        if out is not None:
            ctx.transfer = {
                "seconds": rec.seconds,
                "bytes": rec.nbytes,
                "connector": rec.connector,
                "emulated": rec.emulated,
            }
            self.metrics.kv_transfer_time.observe(rec.seconds)
            self.metrics.kv_transfer_bytes.inc(rec.nbytes)
            self.metrics.kv_transfers.inc()
            if out.first_scheduled_time is not None:
                self.metrics.kv_ready_delay.observe(max(0.0, out.first_scheduled_time - rec.end))
        release_soon(ctx.kv)


def release_soon(kv: dict[str, Any]) -> None:
    """Tell the prefiller named in `kv` to free its blocks, off the event loop, best effort."""
    asyncio.get_running_loop().run_in_executor(None, connector.release, kv)
