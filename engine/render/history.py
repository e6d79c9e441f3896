"""Does a chat template give the next turn the tokens the decoder computed? Turn k's KV is
its prompt and the reply as generated; turn k+1 renders the history again. A template that
drops or rewrites part of it (Qwen3-style templates drop earlier `<think>` reasoning) makes
the new prompt diverge there, and only the part before can be reused: vLLM's
bidirectional transfer assumes it all matches, and answers wrongly without a word."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.kept import common_prefix
from engine.render.tokenizer import TextTokenizer

# a turn with reasoning and an answer, then the user's next message
QUESTION = "Which city is the capital of France, and why did it become so?"
REPLY = ("<think>\nThe user asks about France. Paris has been the seat of the kings and of "
         "the government for centuries.\n</think>\n\nParis: the seat of the crown and then of "
         "the state since the Middle Ages.")
FOLLOW_UP = "And of Italy?"
REASONING = REPLY.split("</think>", maxsplit=1)[0].removeprefix("<think>").strip()


@dataclass(frozen=True)
class HistoryCheck:
    kept_tokens: int  # of turn k's prompt + reply, how many turn k+1 starts with
    turn_tokens: int  # turn k's prompt + reply
    dropped: str | None  # what the template left out, when something was

    @property
    def share(self) -> float:
        return self.kept_tokens / self.turn_tokens


def check_history(tok: TextTokenizer) -> HistoryCheck:
    """Render a two-turn conversation both ways and compare token IDs."""
    first = [{"role": "user", "content": QUESTION}]
    computed = tok.encode(tok.render_chat(first)) + tok.encode(REPLY)
    second = [*first, {"role": "assistant", "content": REPLY},
              {"role": "user", "content": FOLLOW_UP}]
    rendered = tok.encode(tok.render_chat(second))
    kept = common_prefix(computed, rendered)
    dropped = None
    if kept < len(computed):
        text = tok.render_chat(second)
        # the reasoning itself counts, not "<think>": a generation prompt may hold an
        # empty block
        dropped = ("earlier reasoning (<think> blocks)" if REASONING not in text
                   else "part of the earlier reply")
    return HistoryCheck(kept, len(computed), dropped)
