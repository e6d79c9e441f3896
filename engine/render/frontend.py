"""The front end of a model: chat templating and tokenization on the way in, detokenization
and reasoning / tool-call parsing on the way out, with the CPU each costs counted.

The engine server uses one when it does this work itself (a collocated front end);
the render server is nothing else. Both must be configured alike (tokenizer,
template, parsers), or the same tokens derender differently: the `fingerprint`
names a configuration, travels with render output, generate responses and
stream states, and a mismatch is refused rather than silently giving another split.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.config import load_model_config
from engine.render.chat import delta, finish_reason, message
from engine.render.derender import DerenderError, StreamState, derender_chunk
from engine.render.parsing import Parsed
from engine.render.protocol import ParsedRequest
from engine.render.tokenizer import TextTokenizer

REASONING_PARSERS = ("qwen3", "none")  # qwen3: <think> ... </think> (DeepSeek-R1's markup too)
TOOL_CALL_PARSERS = ("hermes", "none")  # hermes: <tool_call>{"name", "arguments"}</tool_call>
STAGES = ("render", "derender")


@dataclass(frozen=True)
class FrontendConfig:
    """What must match between a render tier and the engine behind it."""

    model_dir: str | None = None
    chat_template: str | None = None  # a jinja2 file overriding the tokenizer's template
    reasoning_parser: str = "qwen3"
    tool_call_parser: str = "hermes"

    def args(self) -> tuple[str, ...]:
        """This configuration as server flags (add_frontend_args reads them back)."""
        template = ("--chat-template", self.chat_template) if self.chat_template else ()
        return (
            *template,
            "--reasoning-parser",
            self.reasoning_parser,
            "--tool-call-parser",
            self.tool_call_parser,
        )

    def validate(self) -> None:
        if self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"--reasoning-parser must be one of {', '.join(REASONING_PARSERS)}")
        if self.tool_call_parser not in TOOL_CALL_PARSERS:
            raise ValueError(f"--tool-call-parser must be one of {', '.join(TOOL_CALL_PARSERS)}")
        if self.chat_template and not Path(self.chat_template).is_file():
            raise ValueError(f"--chat-template {self.chat_template}: no such file")


class Frontend:
    """Renders requests to token IDs and derenders generated IDs, counting its CPU time."""

    def __init__(self, config: FrontendConfig) -> None:
        config.validate()
        self.config = config
        vocab = _model_vocab(config.model_dir)
        self.tokenizer = TextTokenizer.load(config.model_dir, config.chat_template, vocab)
        self.vocab_size = vocab or self.tokenizer.vocab_size
        h = hashlib.sha256()
        for part in (
            self.tokenizer.tok.to_str(),
            self.tokenizer.template_source,
            config.reasoning_parser,
            config.tool_call_parser,
            str(self.vocab_size),
        ):
            h.update(part.encode() + b"\0")
        self.fingerprint = h.hexdigest()[:16]
        # CPU seconds of this process's threads spent per stage, and requests per stage
        self.cpu_seconds = dict.fromkeys(STAGES, 0.0)
        self._count_lock = threading.Lock()
        self.requests = dict.fromkeys(STAGES, 0)

    @property
    def parses(self) -> bool:
        """Whether any parser is configured (derender then needs the chat request)."""
        return self.config.reasoning_parser != "none" or self.config.tool_call_parser != "none"

    @contextlib.contextmanager
    def timed(self, stage: str, request_done: bool = False) -> Iterator[None]:
        """Count the calling thread's CPU time inside the block against `stage`, and one
        request when `request_done` (the request's last piece of work at this stage)."""
        start = time.thread_time()
        try:
            yield
        finally:
            with self._count_lock:  # large requests render on worker threads
                self.cpu_seconds[stage] += time.thread_time() - start
                self.requests[stage] += request_done

    def prompt_ids(self, req: ParsedRequest) -> list[int]:
        """The prompt's token IDs: a chat rendered and tokenized, text tokenized, IDs as given."""
        if req.messages is None and isinstance(req.prompt, list):
            return req.prompt
        with self.timed("render", request_done=True):
            if req.messages is None:
                assert isinstance(req.prompt, str)  # IDs returned above
                return self.tokenizer.encode(req.prompt)
            return self.tokenizer.chat_ids(req.messages, req.tools)

    def check(self, fingerprint: object, what: str) -> None:
        """DerenderError unless `fingerprint` (from a peer) is absent or equals ours."""
        if fingerprint is not None and fingerprint != self.fingerprint:
            raise DerenderError(
                f"{what} came from a front end configured differently "
                f"(fingerprint {fingerprint!r}, here {self.fingerprint!r}): "
                "tokenizer, chat template and parsers must match"
            )

    def start_stream(self, request_id: str, chat: ParsedRequest | None) -> StreamState:
        """A fresh stream state; `chat` (the chat request) decides which markup is parsed."""
        if chat is None and self.parses:
            raise DerenderError(
                "chat_request is required when a reasoning or tool-call parser is "
                "configured (without it, markup would leak into content)"
            )
        reasoning = self.config.reasoning_parser != "none"
        tools = (
            self.config.tool_call_parser != "none"
            and chat is not None
            and bool(chat.tools)
            and chat.tool_choice != "none"
        )
        return StreamState.start(request_id, reasoning, tools, self.fingerprint)

    def derender_chunk(
        self, state: StreamState, request_id: str, ids: list[int], finished: bool
    ) -> tuple[Parsed, StreamState]:
        """One chunk of generated IDs -> what it completed and the next state."""
        self.check(state.fingerprint, "stream_state")
        with self.timed("derender", request_done=finished):
            return derender_chunk(self.tokenizer, state, request_id, ids, finished, self.vocab_size)

    def derender(self, request_id: str, ids: list[int], chat: ParsedRequest | None) -> Parsed:
        """A whole generation at once."""
        out, _ = self.derender_chunk(self.start_stream(request_id, chat), request_id, ids, True)
        return out

    # NOTE: the engine's chat endpoint and the render server both answer through the two
    # methods below, which makes render -> generate -> derender equal the engine's own
    def chat_whole(
        self, request_id: str, ids: list[int], chat: ParsedRequest | None,
        engine_reason: str | None,
    ) -> tuple[dict[str, Any], str | None]:
        """A whole output's ChatCompletion message and finish_reason."""
        parsed = self.derender(request_id, ids, chat)
        return message(parsed), finish_reason(engine_reason, bool(parsed.tool_calls))

    def chat_chunk(
        self, state: StreamState, request_id: str, ids: list[int], engine_reason: str | None
    ) -> tuple[dict[str, Any], str | None, StreamState]:
        """A streamed chunk's delta and finish_reason (None until the output ends: the engine's
        `engine_reason` is None), and the next stream state."""
        first, before = state.num_tokens == 0, state.parser["num_tool_calls"]
        parsed, state = self.derender_chunk(state, request_id, ids, engine_reason is not None)
        reason = finish_reason(engine_reason, state.parser["num_tool_calls"] > 0)
        return delta(parsed, first, before), reason, state


def _model_vocab(model: str | None) -> int | None:
    """The model's vocabulary size (a preset or a config.json), None when `model` names neither
    (a render server may serve any name; the tokenizer's vocabulary then bounds the IDs)."""
    try:
        return load_model_config(model).vocab_size if model else None
    except ValueError:
        return None


def add_frontend_args(ap: argparse.ArgumentParser) -> None:
    """The front-end flags, the same on engine servers and render servers."""
    ap.add_argument("--chat-template", default=None, help="a jinja2 chat template file")
    ap.add_argument("--reasoning-parser", default="qwen3", choices=REASONING_PARSERS)
    ap.add_argument("--tool-call-parser", default="hermes", choices=TOOL_CALL_PARSERS)


def frontend_config(a: argparse.Namespace) -> FrontendConfig:
    """The configuration add_frontend_args' flags name (the tokenizer from --model's directory)."""
    return FrontendConfig(
        model_dir=a.model,
        chat_template=a.chat_template,
        reasoning_parser=a.reasoning_parser,
        tool_call_parser=a.tool_call_parser,
    )
