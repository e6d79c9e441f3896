"""Named workloads that mirror the guide's situations.

`scale` shrinks every length (a CPU engine cannot prefill 8k tokens quickly);
`output_scale`, when given, shrinks output lengths instead (to keep a preset's
decode:prefill time ratio on hardware whose ratio differs from a GPU's), and a
multi-turn preset's think time with them;
`rate` (requests/s, a conversation's every turn counted) and `num_prompts` override
the preset's arrivals and size.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import SyntheticSpec, Workload, synthesize

# chat prompts are sent as one English word per token ID (advisor.measure.client.text_of),
# about 1.3 tokens per word with real tokenizers: 7000 words is a ~9k-token prompt
AGENT_TOOLS = tuple({"type": "function", "function": {
    "name": name, "description": doc,
    "parameters": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}}}
    for name, doc, arg in (("search", "Search the knowledge base", "query"),
                           ("read_file", "Read a file of the repository", "path"),
                           ("run_tests", "Run the test suite and return failures", "selector")))

PRESETS: dict[str, tuple[str, SyntheticSpec]] = {
    "long-prompt": ("the guide's measurement: ~8k-token prompts, 256 output tokens, Poisson",
                    SyntheticSpec(input=LengthDist("uniform", 8192, range_ratio=0.05),
                                  output=LengthDist("fixed", 256),
                                  arrivals=Arrivals("poisson", 0.4))),
    "chat-multiturn": ("5-turn chats: each turn's prompt is the whole history plus new user text",
                       SyntheticSpec(input=LengthDist("lognormal", 1024, sigma=0.6, high=4096),
                                     turn_input=LengthDist("lognormal", 256, sigma=0.6, high=1024),
                                     output=LengthDist("lognormal", 192, sigma=0.5, high=512),
                                     arrivals=Arrivals("poisson", 2.5), turns=5, think_s=3.0)),
    "agent-loop": ("many short turns over a growing context (tool results in, short calls out)",
                   SyntheticSpec(input=LengthDist("uniform", 2048, range_ratio=0.25),
                                 turn_input=LengthDist("uniform", 192, range_ratio=0.5),
                                 output=LengthDist("uniform", 48, range_ratio=0.5),
                                 arrivals=Arrivals("poisson", 3.0), turns=10, think_s=0.2)),
    "bursty-low": ("low average rate arriving in bursts (gamma, burstiness 0.25)",
                   SyntheticSpec(input=LengthDist("lognormal", 1024, sigma=0.8, high=8192),
                                 output=LengthDist("lognormal", 128, sigma=0.6, high=512),
                                 arrivals=Arrivals("gamma", 0.2, burstiness=0.25))),
    "chat-agent": ("long chat prompts (~9k tokens: tools, history) answered with reasoning and "
                   "tool calls, over the chat API: the front end's templating, tokenization and "
                   "parsing are measured",
                   SyntheticSpec(input=LengthDist("uniform", 7000, range_ratio=0.1),
                                 output=LengthDist("lognormal", 384, sigma=0.4, high=1024),
                                 arrivals=Arrivals("poisson", 0.5), chat=True, tools=AGENT_TOOLS)),
    "short-chat": ("short prompts, short answers, Poisson",
                   SyntheticSpec(input=LengthDist("uniform", 256, range_ratio=0.5),
                                 output=LengthDist("uniform", 128, range_ratio=0.5),
                                 arrivals=Arrivals("poisson", 2.0))),
}
# the presets whose conversations have several turns (a sweep adds bidirectional P/D)
MULTI_TURN = tuple(name for name, (_, spec) in PRESETS.items() if spec.turns > 1)
# the single-turn chat presets: templating, tokenization and parsing of long prompts (a sweep
# adds the render split)
CHAT_FRONTEND = tuple(name for name, (_, spec) in PRESETS.items() if spec.chat and spec.turns == 1)


def preset_spec(name: str, scale: float = 1.0, rate: float | None = None,
                num_prompts: int | None = None, output_scale: float | None = None,
                shared_prefix: float = 0.0) -> SyntheticSpec:
    """A preset's spec with lengths scaled (think time with the outputs) and rate (requests/s,
    turns included) / size overridden; with `shared_prefix` (0 to under 1), that share of a
    first turn's mean length is a prefix every request shares (a system prompt), the rest
    unique, so prompts keep their mean length."""
    if name not in PRESETS:
        raise ValueError(f"unknown workload preset {name!r}; one of {', '.join(PRESETS)}")
    out_scale = scale if output_scale is None else output_scale
    if not scale > 0 or not out_scale > 0:
        raise ValueError(f"scales must be > 0, not {scale} / {out_scale}")
    spec = PRESETS[name][1]
    # think time scales with the outputs, so that a conversation keeps its shape when a
    # sweep shortens the replies
    spec = replace(spec, input=spec.input.scaled(scale), output=spec.output.scaled(out_scale),
                   turn_input=spec.turn_input.scaled(scale) if spec.turn_input else None,
                   think_s=spec.think_s * out_scale)
    if not 0 <= shared_prefix < 1:
        raise ValueError(f"a shared prefix is a share of the prompt, 0 to under 1, not "
                         f"{shared_prefix}")
    if shared_prefix:
        if spec.chat:
            raise ValueError(f"{name} sends chat messages: a shared prefix applies to the "
                             "token-ID presets")
        prefix = round(spec.input.mean * shared_prefix)
        spec = replace(spec, input=spec.input.scaled((spec.input.mean - prefix)
                                                     / spec.input.mean),
                       shared_prefix_len=prefix)
    if rate is not None:
        spec = replace(spec, arrivals=replace(spec.arrivals, rate=rate))
    if num_prompts is not None:
        spec = replace(spec, num_prompts=num_prompts)
    spec.validate()
    return spec


def preset(name: str, seed: int, **overrides: Any) -> Workload:
    """The named workload, reproducible from `seed` (see preset_spec for overrides)."""
    w = synthesize(preset_spec(name, **overrides), seed, name)
    w.params = {"preset": name, "seed": seed, **overrides}
    return w


def seed_for(seed: int, rate: float) -> int:
    """One seed per rate (same across placements): prompts never repeat across rates, so a
    prefix cache cannot carry work from one rate to the next."""
    return seed * 100_003 + round(rate * 10_000)
