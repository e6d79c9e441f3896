"""OpenAI-style request parsing and error bodies for the engine servers and the proxy."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.core.sequence import MAX_LOGIT_BIAS, MAX_STOP_TOKEN_IDS, SamplingParams


class RequestError(ValueError):
    """A bad request: becomes HTTP `status` with an OpenAI-style error body."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 err_type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.status, self.err_type = param, status, err_type

    def body(self) -> dict[str, Any]:
        return error_body(str(self), self.err_type, self.status, self.param)


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "code": code, "param": param}}


@dataclass
class ParsedRequest:
    """A validated completions or chat request, reduced to what the engine needs."""

    model: str
    prompt: str | list[int]  # text, or token ids
    messages: list[dict[str, Any]] | None
    params: SamplingParams
    stream: bool
    include_usage: bool
    kv_transfer_params: dict[str, Any] | None
    tools: list[dict[str, Any]] | None = None  # chat: function tools offered to the model
    tool_choice: str | dict[str, Any] = "auto"
    return_token_ids: bool = False  # vLLM's: the response carries prompt_token_ids too


def _typed(body: dict[str, Any], key: str, types: tuple[type, ...], default: Any,
           check: Callable[[Any], bool] | None = None, what: str = "") -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    # NOTE: bool is a subclass of int, and a JSON true is never a valid count or number here
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        raise RequestError(f"'{key}' must be {what or types}", key)
    if check is not None and not check(value):
        raise RequestError(f"'{key}' must be {what}", key)
    return value


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(f"request body is not valid JSON: {e}") from None
    except RecursionError:
        raise RequestError("request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    return body


ROLES = ("system", "developer", "user", "assistant", "tool")
# OpenAI fields this engine does not implement, with the values that ask for nothing: any
# other value is refused, not ignored (the client would get output it did not ask for)
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "stop": ("", []), "logprobs": (False,), "top_logprobs": (0,), "presence_penalty": (0,),
    "frequency_penalty": (0,), "repetition_penalty": (1,), "best_of": (1,), "echo": (False,),
    "suffix": ("",), "min_tokens": (0,), "use_beam_search": (False,),
    "response_format": ({"type": "text"},)}


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise RequestError("'messages' must be a non-empty list", "messages")
    return [_message(m) for m in msgs]


def _message(m: object) -> dict[str, Any]:
    """One chat message, checked, with what chat templates read of it: role, content, an
    assistant's tool calls, a tool reply's id and name, earlier reasoning: a field left out
    would render an earlier turn as something the model never said."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise RequestError("each message needs a string 'role'", "messages")
    role, content = m["role"], m.get("content")
    if role not in ROLES:
        raise RequestError(f"message role {role!r} is not one of {', '.join(ROLES)}", "messages")
    if not isinstance(content, str) and not (content is None and role == "assistant"):
        raise RequestError(f"a {role} message's 'content' must be a string", "messages")
    out = {"role": role, "content": content or ""}
    calls = m.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list) or not all(map(_is_call, calls)):
            raise RequestError("'tool_calls' belong to an assistant message, each "
                               "{\"type\": \"function\", \"function\": {\"name\": ..., "
                               "\"arguments\": ...}}", "messages")
        out["tool_calls"] = [_call(c) for c in calls]
    for key in ("tool_call_id", "name", "reasoning_content", "reasoning"):
        if m.get(key) is not None:
            if not isinstance(m[key], str):
                raise RequestError(f"message '{key}' must be a string", "messages")
            out[key] = m[key]
    return out


def _call(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call as a template may insert its arguments raw: a string that is JSON stays
    as sent (the model's own text, so a next turn reuses its KV), any other string becomes
    a JSON string, so that it can never close the markup around it."""
    args = call["function"].get("arguments", "{}")
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            args = json.dumps(args)
        except RecursionError:
            raise RequestError("a tool call's 'arguments' nest deeper than a JSON parser "
                               "follows", "messages") from None
    return {**call, "function": {**call["function"], "arguments": args}}


def _is_call(call: Any) -> bool:
    fn = call.get("function") if isinstance(call, dict) else None
    return (call.get("type", "function") == "function" and isinstance(fn, dict)
            and isinstance(fn.get("name"), str)
            and isinstance(fn.get("arguments", "{}"), (str, dict)))


def _refuse_unsupported(body: dict[str, Any]) -> None:
    """RequestError naming the first field of UNSUPPORTED that asks for something."""
    for key, nothing in UNSUPPORTED.items():
        v = body.get(key)
        if v is not None and not any(v == n and isinstance(v, bool) == isinstance(n, bool)
                                     for n in nothing):
            raise RequestError(f"{key!r} is not supported by this engine (leave it out)", key)


def _tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any]]:
    tools = _typed(body, "tools", (list,), None, what="a list of tools")
    for t in tools or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or t.get("type", "function") != "function" \
                or not isinstance(fn.get("name"), str):
            raise RequestError("each of 'tools' must be {\"type\": \"function\", \"function\": "
                               "{\"name\": ...}}", "tools")
    choice = body.get("tool_choice", "auto")
    if choice not in ("auto", "none", "required") and not isinstance(choice, dict):
        raise RequestError(
            "'tool_choice' must be auto, none, required or a function", "tool_choice"
        )
    return tools or None, choice


def _logit_bias(body: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    bias = _typed(body, "logit_bias", (dict,), {}, what="an object of token id -> bias")
    if len(bias) > MAX_LOGIT_BIAS:
        raise RequestError(f"'logit_bias' holds at most {MAX_LOGIT_BIAS} entries", "logit_bias")
    out = []
    for k, v in bias.items():
        if (
            not str(k).isdigit()
            or isinstance(v, bool)
            or not isinstance(v, (int, float))
            or not -100 <= v <= 100
        ):
            raise RequestError(
                "'logit_bias' maps token ids to numbers in [-100, 100]", "logit_bias"
            )
        out.append((int(k), float(v)))
    return tuple(sorted(out))


def _prompt(body: dict[str, Any]) -> str | list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return prompt
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        return prompt
    raise RequestError("'prompt' must be a non-empty string or list of token ids", "prompt")


def tokens_request(body: object, served_model: str) -> dict[str, Any]:
    """A tokens-only /inference/v1/generate body as the equivalent completions body:
    {"token_ids": [...], "sampling_params": {...}, "stream", "kv_transfer_params"}."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    if "token_ids" not in body:
        raise RequestError("'token_ids' is required", "token_ids")
    params = _typed(body, "sampling_params", (dict,), {}, what="an object")
    out = {k: v for k, v in params.items() if k not in ("model", "prompt", "messages", "stream")}
    out.update(model=served_model, prompt=body["token_ids"], stream=body.get("stream", False))
    if "kv_transfer_params" in body:
        out["kv_transfer_params"] = body["kv_transfer_params"]
    return out


def sampling_body(params: SamplingParams) -> dict[str, Any]:
    """`params` as the request fields parse_request reads back (a render's sampling_params)."""
    return {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "seed": params.seed,
        "ignore_eos": params.ignore_eos,
        "stop_token_ids": list(params.stop_token_ids),
        "logit_bias": {str(t): b for t, b in params.logit_bias},
    }


def parse_request(body: dict[str, Any], chat: bool, served_model: str) -> ParsedRequest:
    """Validate a /v1/completions (chat=False) or /v1/chat/completions body."""
    model = _typed(body, "model", (str,), served_model, what="a string")
    if model != served_model:
        raise RequestError(
            f"model {model!r} is not served here (serving {served_model!r})",
            "model",
            status=400,
            err_type="model_not_found",
        )
    if _typed(body, "n", (int,), 1, what="an integer") != 1:
        raise RequestError("only n=1 is supported", "n")
    _refuse_unsupported(body)
    messages = _messages(body) if chat else None
    prompt = "" if chat else _prompt(body)
    max_key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    stop_ids = _typed(body, "stop_token_ids", (list,), [], what="a list of integers")
    if len(stop_ids) > MAX_STOP_TOKEN_IDS:
        raise RequestError(f"'stop_token_ids' holds at most {MAX_STOP_TOKEN_IDS} ids",
                           "stop_token_ids")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise RequestError("'stop_token_ids' must be a list of integers", "stop_token_ids")
    top_k = _typed(body, "top_k", (int,), 0, lambda v: v >= -1, "an integer >= -1")
    params = SamplingParams(
        max_tokens=_typed(body, max_key, (int,), 16, lambda v: v >= 1, "an integer >= 1"),
        temperature=float(
            _typed(body, "temperature", (int, float), 1.0, lambda v: v >= 0, "a number >= 0")
        ),
        top_p=float(
            _typed(body, "top_p", (int, float), 1.0, lambda v: 0 < v <= 1, "a number in (0, 1]")
        ),
        top_k=max(top_k, 0),  # -1 means "no top-k", as in vLLM
        seed=_typed(body, "seed", (int,), None, what="an integer"),
        ignore_eos=_typed(body, "ignore_eos", (bool,), False, what="a boolean"),
        stop_token_ids=tuple(stop_ids),
        logit_bias=_logit_bias(body),
    )
    stream = _typed(body, "stream", (bool,), False, what="a boolean")
    opts = _typed(body, "stream_options", (dict,), {}, what="an object")
    include_usage = _typed(opts, "include_usage", (bool,), False, what="a boolean")
    kv = _typed(body, "kv_transfer_params", (dict,), None, what="an object")
    tools, tool_choice = _tools(body) if chat else (None, "none")
    return ParsedRequest(
        model, prompt, messages, params, stream, include_usage, kv, tools, tool_choice,
        _typed(body, "return_token_ids", (bool,), False, what="a boolean"),
    )
