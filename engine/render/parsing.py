"""Incremental reasoning (`<think>`) and tool-call (`<tool_call>`) parsing with a small,
serializable state: `feed` returns what each piece of text completes and costs work
proportional to the piece, never to the history (vLLM's streaming derender replays the
whole history per chunk). Markup that is malformed or left open stays in `content`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
_CLOSER = {"reasoning": THINK_CLOSE, "tool": TOOL_CLOSE}
_LONGEST_TAG = max(map(len, (THINK_OPEN, TOOL_OPEN, *_CLOSER.values())))


@dataclass
class Parsed:
    """What some text (or a whole output) parsed into."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: Parsed) -> None:
        self.content += other.content
        self.reasoning += other.reasoning
        self.tool_calls += other.tool_calls


MAX_TOOL_TEXT = 1 << 20  # an unfinished tool call's body a stream state may carry

@dataclass
class ParserState:
    """Everything the parser carries between pieces (JSON-serializable via asdict)."""

    mode: str = "content"  # content | reasoning | tool
    held: str = ""  # a suffix that may be the start of the next tag
    tool_text: str = ""  # the body of an unfinished tool call
    num_tool_calls: int = 0
    reasoning: bool = True  # parse <think> markup
    tools: bool = True  # parse <tool_call> markup

    def openers(self) -> tuple[str, ...]:
        return (THINK_OPEN,) * self.reasoning + (TOOL_OPEN,) * self.tools


def _partial_suffix(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `tags`."""
    best = 0
    for tag in tags:
        for n in range(min(len(tag) - 1, len(text)), best, -1):
            if text.endswith(tag[:n]):
                best = n
                break
    return best


class StreamParser:
    def __init__(self, state: ParserState | None = None) -> None:
        self.state = state or ParserState()

    @classmethod
    def make(cls, reasoning: bool = True, tools: bool = True) -> StreamParser:
        """A parser at the start of an output, parsing the markup kinds asked for."""
        return cls(ParserState(reasoning=reasoning, tools=tools))

    def feed(self, piece: str) -> Parsed:
        """Parse the next piece of text; returns what it completed. Linear in the piece: an
        index moves through the text, and each tag's next place is looked for again only
        once the index has passed the last one found (a piece of 20k tool calls took 4x
        as long as one of 10k when the text was cut after each tag)."""
        st, out = self.state, Parsed()
        text, st.held = st.held + piece, ""
        pos, found, content = 0, dict[str, int](), list[str]()  # content joined once, at the end
        while True:
            if st.mode == "content":
                openers = st.openers()
                hits = [(at, t) for t in openers if (at := _next(text, t, pos, found)) >= 0]
                if hits:
                    at, tag = min(hits)
                    content.append(text[pos:at])
                    st.mode = "reasoning" if tag == THINK_OPEN else "tool"
                    pos = at + len(tag)
                    continue
                keep = _partial_suffix(text[pos:], openers)
            else:
                closer = _CLOSER[st.mode]
                at = _next(text, closer, pos, found)
                if at >= 0:
                    self._emit(out, content, text[pos:at], closed=True)
                    st.mode = "content"
                    pos = at + len(closer)
                    continue
                keep = _partial_suffix(text[pos:], (closer,))
            end = len(text) - keep
            self._emit(out, content, text[pos:end], closed=False)
            st.held = text[end:]
            out.content = "".join(content)
            return out

    def finish(self) -> Parsed:
        """The end of the stream: held text and unterminated markup become content/reasoning."""
        st, out = self.state, Parsed()
        if st.mode == "reasoning":
            out.reasoning += st.held
        elif st.mode == "tool":
            out.content += TOOL_OPEN + st.tool_text + st.held
        else:
            out.content += st.held
        self.state = ParserState(num_tool_calls=st.num_tool_calls, reasoning=st.reasoning,
                                 tools=st.tools)
        return out

    def _emit(self, out: Parsed, content: list[str], text: str, closed: bool) -> None:
        st = self.state
        if st.mode == "content":
            content.append(text)
        elif st.mode == "reasoning":
            out.reasoning += text
        else:
            st.tool_text += text
            if closed:
                body, st.tool_text = st.tool_text, ""
                call = _tool_call(body, st.num_tool_calls)
                if call is None:
                    content.append(TOOL_OPEN + body + TOOL_CLOSE)
                else:
                    out.tool_calls.append(call)
                    st.num_tool_calls += 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self.state)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StreamParser:
        """Rebuild from to_json(); ValueError when `d` is not such a state."""
        if not isinstance(d, dict) or set(d) != set(ParserState.__dataclass_fields__):
            raise ValueError("parser state has the wrong fields")
        st = ParserState(**d)
        if (
            st.mode not in ("content", "reasoning", "tool")
            or not isinstance(st.held, str)
            or not isinstance(st.tool_text, str)
            or not isinstance(st.num_tool_calls, int)
            or not isinstance(st.reasoning, bool)
            or not isinstance(st.tools, bool)
            or (st.mode == "reasoning" and not st.reasoning)
            or (st.mode == "tool" and not st.tools)
            or len(st.held) >= _LONGEST_TAG
            or len(st.tool_text) > MAX_TOOL_TEXT
        ):
            raise ValueError("parser state is malformed")
        return cls(st)


def _next(text: str, tag: str, pos: int, found: dict[str, int]) -> int:
    """Where `tag` next occurs in `text` at or after `pos` (-1: nowhere), from `found` (what
    was found before, for a `pos` no later) unless `pos` has passed it."""
    at = found.get(tag)
    if at is None or 0 <= at < pos:
        at = found[tag] = text.find(tag, pos)
    return at


def _tool_call(body: str, index: int) -> dict[str, Any] | None:
    """An OpenAI tool call from a Hermes body, or None when it is not one."""
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError):  # a model's text, however deep: content
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    return {
        "id": f"call_{index}",
        "type": "function",
        "function": {
            "name": obj["name"],
            "arguments": args if isinstance(args, str) else json.dumps(args),
        },
    }


def parse(text: str) -> Parsed:
    """A whole output at once (the non-streaming path)."""
    p = StreamParser()
    out = p.feed(text)
    out.extend(p.finish())
    return out
