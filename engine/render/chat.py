"""OpenAI chat shapes of derendered output, shared by the engine server and the render server,
so that both give the same message for the same tokens."""

from __future__ import annotations

from typing import Any

from engine.render.parsing import Parsed


def message(parsed: Parsed) -> dict[str, Any]:
    """A ChatCompletion message: content, reasoning and tool calls kept apart."""
    return {"role": "assistant",
            "content": parsed.content if parsed.content or not parsed.tool_calls else None,
            "reasoning": parsed.reasoning or None, "tool_calls": parsed.tool_calls}


def delta(parsed: Parsed, first: bool, calls_before: int) -> dict[str, Any]:
    """A chunk's delta: only what this chunk completed (tool calls whole, each with its index
    in the output: `calls_before` is how many earlier chunks completed)."""
    out: dict[str, Any] = {"role": "assistant"} if first else {}
    if parsed.content:
        out["content"] = parsed.content
    if parsed.reasoning:
        out["reasoning"] = parsed.reasoning
    if parsed.tool_calls:
        out["tool_calls"] = [{"index": calls_before + i, **c}
                             for i, c in enumerate(parsed.tool_calls)]
    return out


def finish_reason(engine_reason: str | None, tool_calls: bool) -> str | None:
    """OpenAI's finish_reason from the engine's, and whether the output called tools."""
    if engine_reason is None:
        return None
    if tool_calls:
        return "tool_calls"
    return "length" if engine_reason in ("length", "remote_decode") else engine_reason

