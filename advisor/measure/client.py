"""Open-loop streaming client for any OpenAI-compatible endpoint (ours, vLLM, llm-d, Dynamo).

Requests go out at their scheduled times whatever earlier responses are doing
(open loop); `max_concurrency` only caps how many are in flight. Every request
sent, and every turn that could not be sent because an earlier turn of its
conversation failed, leaves a RequestRecord: nothing is dropped. Times are
`time.monotonic()` seconds; a chunk's is when the kernel received it (`arrival`), so
the client's own delays in reading it are not charged to the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson

from advisor.measure.arrival import StampedSockets
from advisor.measure.records import CHAT, ClientRun, Endpoint, RequestRecord
from advisor.measure.sse import EventData
from workloads.spec import Conversation, Workload

START_LEAD_S = 0.05  # schedule t=0 slightly ahead so request 0 is not late by setup work
LAG_TICK_S = 0.01
BYTES_PER_TOKEN = 8  # a token id written in JSON ("123456, "), or a word of text_of()
PRE_ENCODED_BYTES = 256 << 20  # first-turn prompts encoded before t=0 when they fit in this
MAX_ERROR_BYTES = 64 << 10  # of an error body: its message is in its first bytes


WORDS = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money "
    "story fact month lot right study book eye job word business issue side kind head "
    "house service friend father power hour game line end member law car city name "
    "team minute idea kid body information back parent face others level office door "
    "health person art war history party result change morning reason research girl"
).split()


def _dispatch(
    loop: asyncio.AbstractEventLoop,
    convs: list[Conversation],
    start: float,
    launch: Callable[[Conversation], None],
) -> None:
    """Hand each conversation to the loop at its start time, from a thread: the loop's
    timers wake up to a millisecond late (epoll timeouts are whole ms), time.sleep within
    ~0.1 ms."""
    for conv in convs:
        delay = start + conv.start - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        loop.call_soon_threadsafe(launch, conv)


async def _lag_probe(lags: list[float], tick_s: float = LAG_TICK_S) -> None:
    """Until cancelled: how late the event loop wakes up from a `tick_s` sleep, each time
    (what every stream's handling waits on when the client is busier than it can keep up
    with)."""
    while True:
        due = time.monotonic() + tick_s
        await asyncio.sleep(tick_s)
        lags.append(max(0.0, time.monotonic() - due))


def read_bufsize(workload: Workload) -> int:
    """aiohttp's read buffer for this workload's responses: room for one event as long as
    its longest context written out (a server echoing the prompt's token ids, as vLLM does
    for return_token_ids, sends them in one event), at least aiohttp's 64 KiB.

    A line longer than twice the buffer fails the stream (LineTooLong), so the default
    fails 128k-token prompts outright; one too small for the next event pauses the socket
    each time the buffer fills, charging the client's reads to the server's latency."""
    need = BYTES_PER_TOKEN * workload.longest() + (1 << 16)
    return 1 << max(16, (need - 1).bit_length())


def first_prompts(workload: Workload) -> dict[str, orjson.Fragment]:
    """Each conversation's first prompt as JSON, encoded now rather than when it is due
    (~1 ms per 100k token ids, on the loop every stream waits on); none when they would
    take over PRE_ENCODED_BYTES (later turns carry replies: encoded when sent)."""
    total = sum(len(c.turns[0].new_tokens) for c in workload.conversations if c.turns)
    if BYTES_PER_TOKEN * total > PRE_ENCODED_BYTES:
        return {}
    return {c.conversation_id: orjson.Fragment(orjson.dumps(c.turns[0].new_tokens))
            for c in workload.conversations if c.turns}


def text_of(token_ids: list[int]) -> str:
    """Chat prompts need text: one common English word per token id (counts come from usage)."""
    return " ".join(WORDS[t % len(WORDS)] for t in token_ids)


class Client:
    """Sends a Workload to an Endpoint. One instance per run."""

    def __init__(
        self,
        endpoint: Endpoint,
        max_concurrency: int | None = None,
        on_done: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        endpoint.validate()
        self.endpoint, self.on_done = endpoint, on_done
        self._cap = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self._records: list[RequestRecord] = []
        self._session: aiohttp.ClientSession | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._sockets = StampedSockets()
        self._first: dict[str, orjson.Fragment] = {}

    async def run(self, workload: Workload, warmups: int = 0,
                  clock: Callable[[], float] | None = None) -> ClientRun:
        """Send `warmups` requests one at a time (recorded, marked warmup), then the workload
        from t=0 = `clock()` (time.monotonic() seconds; default: now, plus a lead)."""
        gc.disable()  # a full collection mid-run stalls every stream's timestamps by ms
        self._tools = workload.tools
        if self.endpoint.path != CHAT:
            self._first = first_prompts(workload)
        try:
            return await self._run(workload, warmups, clock)
        finally:
            gc.enable()

    async def _run(self, workload: Workload, warmups: int,
                   clock: Callable[[], float] | None) -> ClientRun:
        headers = (
            {"Authorization": f"Bearer {self.endpoint.api_key}"} if self.endpoint.api_key else {}
        )
        # aiohttp's default limit of 100 connections would close the loop
        conn = aiohttp.TCPConnector(limit=0, socket_factory=self._sockets)
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(_stamp_sent)
        # NOTE: no session-wide timeout: aiohttp's default 300 s would silently cap a longer
        # --request-timeout, which each request's own asyncio.timeout enforces instead
        async with aiohttp.ClientSession(
            connector=conn, headers=headers, trace_configs=[trace],
            timeout=aiohttp.ClientTimeout(total=None), read_bufsize=read_bufsize(workload),
        ) as self._session:
            for i in range(warmups):
                conv = workload.conversations[i % len(workload.conversations)]
                await self._turns(
                    Conversation(f"warmup-{i}", 0.0, conv.turns[:1]), time.monotonic(), warmup=True
                )
            start = clock() if clock else time.monotonic() + START_LEAD_S
            cpu = time.process_time()
            convs = sorted(workload.conversations, key=lambda c: c.start)
            tasks: list[asyncio.Task[None]] = []
            all_started = asyncio.get_running_loop().create_future()

            def launch(conv: Conversation) -> None:  # on the loop, at conv's start time
                tasks.append(asyncio.create_task(self._turns(conv, start + conv.start)))
                if len(tasks) == len(convs):
                    all_started.set_result(None)

            timer = threading.Thread(
                target=_dispatch,
                name="dispatch",
                daemon=True,
                args=(asyncio.get_running_loop(), convs, start, launch),
            )
            timer.start()
            lags: list[float] = []
            probe = asyncio.create_task(_lag_probe(lags))
            await all_started
            await asyncio.gather(*tasks)
            probe.cancel()
            cpu = time.process_time() - cpu
        return ClientRun.of(self._records, start, cpu, lags)

    async def _turns(self, conv: Conversation, scheduled: float, warmup: bool = False) -> None:
        history: list[int] = []  # completions: token ids sent and received so far
        messages: list[dict[str, Any]] = []  # chat: the same history as messages
        multi = len(conv.turns) > 1
        for k, turn in enumerate(conv.turns):
            if k:
                scheduled = time.monotonic() + turn.think_s
                await asyncio.sleep(turn.think_s)
            rec = RequestRecord(0, conv.conversation_id, k, warmup, scheduled)
            self._records.append(rec)
            if self.endpoint.path == CHAT:
                messages.append({"role": "user", "content": text_of(turn.new_tokens)})
                body: dict[str, Any] = {"messages": list(messages)}
                if self._tools:
                    body["tools"] = self._tools
            else:
                history += turn.new_tokens
                pre = self._first.get(conv.conversation_id) if k == 0 else None
                body = {"prompt": pre if pre is not None else list(history)}
                if multi:
                    body["return_token_ids"] = True  # vLLM's flag; ours always returns them
            if multi:  # vLLM's multi-turn P/D proxy reads it from the body, ours either
                body["conversation_id"] = conv.conversation_id
            reply_text, reply_ids = await self._send(
                rec, body, turn.max_tokens, conv.conversation_id
            )
            if self.on_done:
                self.on_done(rec)
            if not rec.ok:
                self._unsent(conv, k + 1, rec, warmup)
                return
            if self.endpoint.path == CHAT:
                messages.append({"role": "assistant", "content": reply_text})
            elif multi:
                if reply_ids is None:
                    rec.error = (
                        "the server returned no token_ids, so the next turn cannot be built; "
                        f"use {CHAT} for multi-turn"
                    )
                    self._unsent(conv, k + 1, rec, warmup)
                    return
                history += reply_ids

    def _unsent(self, conv: Conversation, first: int, cause: RequestRecord, warmup: bool) -> None:
        for k in range(first, len(conv.turns)):
            rec = RequestRecord(
                0,
                conv.conversation_id,
                k,
                warmup,
                cause.end,
                error=f"not sent: turn {cause.turn} of this conversation failed",
            )
            self._records.append(rec)
            if self.on_done:
                self.on_done(rec)

    async def _send(
        self, rec: RequestRecord, body: dict[str, Any], max_tokens: int, conversation_id: str
    ) -> tuple[str, list[int] | None]:
        """Stream one request into `rec`; returns (reply text, reply token ids or None)."""
        ep = self.endpoint
        body.update(
            model=ep.model,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        if ep.ignore_eos:
            body["ignore_eos"] = True
        if ep.temperature is not None:
            body["temperature"] = ep.temperature
        chat = ep.path == CHAT
        text, ids, saw_ids, done = [], [], False, False
        async with contextlib.AsyncExitStack() as stack:
            if self._cap:
                await stack.enter_async_context(self._cap)
            rec.dispatched = rec.sent = time.monotonic()  # sent: replaced when the body goes out
            try:
                async with asyncio.timeout(ep.timeout_s):
                    assert self._session is not None  # run() opened it
                    async with self._session.post(
                        ep.base_url.rstrip("/") + ep.path,
                        data=orjson.dumps(body),
                        headers={"X-Conversation-Id": conversation_id,
                                 "Content-Type": "application/json"},
                        trace_request_ctx=rec,
                    ) as resp:
                        rec.status = resp.status
                        if resp.status != 200:
                            said = await resp.content.read(MAX_ERROR_BYTES)
                            rec.error = _error_text(said.decode(errors="replace"))
                        else:
                            events = EventData(resp.content)
                            # NOTE: taken now: the connection is released when the stream ends
                            sock = self._sockets.of(resp.connection and resp.connection.transport)
                            async for data in events:
                                now = sock.arrived if sock is not None else time.monotonic()
                                chunk = orjson.loads(data)
                                if not isinstance(chunk, dict):
                                    rec.error = f"stream chunk is not a JSON object: {data[:60]!r}"
                                    break
                                if "error" in chunk:
                                    rec.error = _error_text(json.dumps(chunk))
                                    break
                                if isinstance(chunk.get("kv_transfer"), dict):
                                    secs = chunk["kv_transfer"].get("seconds")
                                    rec.kv_transfer_ms = secs * 1000 if secs is not None else None
                                if chunk.get("usage"):
                                    u = chunk["usage"]
                                    rec.prompt_tokens = u.get("prompt_tokens") or rec.prompt_tokens
                                    cached = (u.get("prompt_tokens_details") or {}).get(
                                        "cached_tokens")
                                    rec.cached_tokens = cached if isinstance(cached, int) \
                                        else rec.cached_tokens
                                    if u.get("completion_tokens") is not None:
                                        rec.output_tokens = u["completion_tokens"]
                                        rec.token_source = "usage"
                                for piece, piece_ids in _content(chunk, chat):
                                    if len(rec.chunks) >= max_tokens:
                                        raise ValueError(f"the stream sent more than its "
                                                         f"max_tokens ({max_tokens}) chunks")
                                    rec.chunks.append(now)
                                    text.append(piece)
                                    if piece_ids is not None:
                                        saw_ids = True
                                        ids += piece_ids
                            done = events.done
            except TimeoutError:
                rec.error = f"timed out after {ep.timeout_s:g} s"
            except (aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError, OSError,
                    ValueError) as e:  # NOTE: a malformed response fails its request alone
                # (orjson.JSONDecodeError is a ValueError)
                rec.error = f"{type(e).__name__}: {e}"
            rec.end = time.monotonic()
        if rec.token_source == "chunks":
            rec.output_tokens = len(rec.chunks)
        if rec.error is None and not rec.chunks:
            rec.error = "the stream ended without any content"
        elif rec.error is None and rec.status == 200 and not done:
            rec.error = "the stream ended without data: [DONE] (cut short?)"
        return "".join(text), ids if saw_ids else None


async def _stamp_sent(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                      _params: aiohttp.TraceRequestChunkSentParams) -> None:
    """Send time = when the request body was written, so the client's own request
    building (~0.4 ms here) is not charged to the server's TTFT."""
    rec = ctx.trace_request_ctx
    if not rec.body_sent:
        rec.body_sent = True
        rec.sent = time.monotonic()


def _content(chunk: dict[str, Any], chat: bool) -> Iterator[tuple[str, list[int] | None]]:
    """(text, token ids or None) of each choice that carries generated content; ValueError
    for a chunk not shaped as OpenAI's (it fails its request alone)."""
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise ValueError(f"malformed stream chunk: choices is {str(choices)[:60]!r}")
    for choice in choices:
        if chat:
            # NOTE: reasoning and tool calls count for TTFT and ITL, but only content goes
            # into the next turn's history
            delta = choice.get("delta") or {}
            piece = delta.get("content") or ""
            has = bool(
                piece
                or delta.get("reasoning")
                or delta.get("reasoning_content")
                or delta.get("tool_calls")
                or choice.get("token_ids")
            )
        else:
            piece = choice.get("text") or ""
            has = bool(piece or choice.get("token_ids"))
        ids = choice.get("token_ids")
        if not isinstance(piece, str) or not (ids is None or isinstance(ids, list)):
            raise ValueError(f"malformed stream chunk: {str(choice)[:60]!r}")
        if has:
            yield piece, ids


def _error_text(body: str) -> str:
    """The OpenAI-style error message when there is one, else the body's start."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        err = json.loads(body)["error"]
        return str(err.get("message", err)) if isinstance(err, dict) else str(err)
    return body[:500] or "empty error body"
