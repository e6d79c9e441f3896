"""Response bodies of one engine request: completions, chat (parsed by the front end),
tokens-only, whole or chunk by chunk."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.core.llm_engine import RequestOutput
from engine.kv.connector import PulledKV
from engine.render import chat
from engine.render.frontend import Frontend
from engine.render.protocol import ParsedRequest
from engine.render.tokenizer import IncrementalDetokenizer


@dataclass(frozen=True)
class Responder:
    """What every response of one server needs: its front end, its model's name, and the
    kv_transfer_params of KV it holds for a request (None on an instance that holds none)."""

    frontend: Frontend
    model: str
    held_kv_params: Callable[[str], dict[str, Any] | None]


class RequestContext:
    """One request's response building (OpenAI shapes), with its streaming state."""

    def __init__(self, responder: Responder, req: ParsedRequest, rid: str, chat: bool,
                 arrival: float, pulled: PulledKV | None, kv: dict[str, Any], prompt: list[int],
                 tokens_only: bool = False) -> None:
        self.responder, self.req, self.rid, self.chat = responder, req, rid, chat
        self.tokens_only = tokens_only
        self.arrival, self.pulled, self.kv = arrival, pulled, kv
        self.prompt, self.num_prompt = prompt, len(prompt)
        self.created = int(time.time())
        self.obj = "chat.completion" if chat else "text_completion"
        fe = responder.frontend
        # streaming state: the chat derender's, or the completions detokenizer
        self.state = fe.start_stream(rid, req) if chat and req.stream else None
        self.detok = IncrementalDetokenizer(fe.tokenizer) if req.stream and not chat else None
        # the pulled KV's transfer, reported once (first chunk) so clients can see it per request
        self.transfer: dict[str, Any] | None = None
        self.headers: dict[str, str] = {}  # extra response headers (a kept turn's location)

    def _usage(self, out: RequestOutput) -> dict[str, Any]:
        n = len(out.token_ids)
        return {"prompt_tokens": self.num_prompt, "completion_tokens": n,
                "total_tokens": self.num_prompt + n,
                "prompt_tokens_details": {"cached_tokens": out.num_cached_tokens}}

    @staticmethod
    def _engine_reason(out: RequestOutput) -> str | None:
        """The engine's finish reason, None until the request finished."""
        return out.finish_reason if out.finished else None

    def _finish_reason(self, out: RequestOutput) -> str | None:
        """OpenAI's finish_reason of an output that is not parsed for tool calls."""
        return chat.finish_reason(self._engine_reason(out), False)

    def _tokens(self, ids: list[int], out: RequestOutput, final: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "request_id": self.rid, "token_ids": ids, "finish_reason": self._finish_reason(out),
            "fingerprint": self.responder.frontend.fingerprint}
        if final:
            body["usage"] = self._usage(out)
            self._add_held_kv(body, out)
        self._add_transfer(body)
        return body

    def _add_held_kv(self, body: dict[str, Any], out: RequestOutput) -> None:
        if out.finish_reason == "remote_decode":
            params = self.responder.held_kv_params(self.rid)
            if params is not None:
                body["kv_transfer_params"] = params

    def body(self, out: RequestOutput) -> dict[str, Any]:
        if self.tokens_only:
            return self._tokens(out.token_ids, out, final=True)
        fe = self.responder.frontend
        choice: dict[str, Any] = {"index": 0, "token_ids": out.token_ids}
        if self.chat:
            choice["message"], choice["finish_reason"] = fe.chat_whole(
                self.rid, out.token_ids, self.req, self._engine_reason(out))
        else:
            with fe.timed("derender", request_done=True):
                choice.update(text=fe.tokenizer.decode(out.token_ids),
                              finish_reason=self._finish_reason(out))
        body: dict[str, Any] = {"id": self.rid, "object": self.obj, "created": self.created,
                "model": self.responder.model, "choices": [choice], "usage": self._usage(out)}
        if self.req.return_token_ids:  # vLLM's places: top level (chat), per choice (text)
            (body if self.chat else choice)["prompt_token_ids"] = self.prompt
        self._add_transfer(body)
        self._add_held_kv(body, out)
        return body

    def chunk(self, out: RequestOutput) -> dict[str, Any]:
        if self.tokens_only:
            return self._tokens(out.new_token_ids, out, final=False)
        fe = self.responder.frontend
        choice: dict[str, Any] = {"index": 0, "token_ids": out.new_token_ids}
        if self.chat:
            assert self.state is not None  # a streamed chat's, made with the context
            choice["delta"], choice["finish_reason"], self.state = fe.chat_chunk(
                self.state, self.rid, out.new_token_ids, self._engine_reason(out))
        else:
            assert self.detok is not None  # a streamed completion's, made with the context
            with fe.timed("derender", request_done=out.finished):
                text = self.detok.feed(out.new_token_ids)
                if out.finished and self.detok.pending:  # the output ends mid-character
                    text += fe.tokenizer.decode(self.detok.pending)
            choice.update(text=text, finish_reason=self._finish_reason(out))
        body = {"id": self.rid, "object": f"{self.obj}.chunk" if self.chat else self.obj,
                "created": self.created, "model": self.responder.model, "choices": [choice]}
        self._add_transfer(body)
        return body

    def _add_transfer(self, body: dict[str, Any]) -> None:
        if self.transfer is not None:
            body["kv_transfer"], self.transfer = self.transfer, None

    def usage_chunk(self, out: RequestOutput) -> dict[str, Any]:
        return {"id": self.rid, "object": f"{self.obj}.chunk" if self.chat else self.obj,
                "created": self.created, "model": self.responder.model, "choices": [],
                "usage": self._usage(out)}
