"""Text <-> token ids for the servers: a `tokenizers` tokenizer plus a jinja2 chat template."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer, models, pre_tokenizers

from engine.render.bpe_fast import fast_encoder

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (2 = presets' EOS)
THINK_AND_TOOL_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
DEFAULT_TOKENIZER = Path(__file__).parent / "data" / "tokenizer.json"  # 512 tokens
# scripts/make_tokenizer.py: a byte-level BPE whose density on English prose is a real
# model's; a model whose vocabulary holds it (presets that mimic real models) gets it
REALISTIC_TOKENIZER = Path(__file__).parent / "data" / "tokenizer-32k.json"
REALISTIC_VOCAB = 32768
# ChatML, as Qwen models use it; tools, when a request has them, in a Hermes-style system turn;
# an assistant turn's tool calls rendered back in the markup the parser reads them from.
DEFAULT_CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\nYou may call functions. Their signatures:\n<tools>"
    "{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>\nFor each call, return "
    "<tool_call>{\"name\": <name>, \"arguments\": <args-object>}</tool_call><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{\"name\": {{ c.function.name | tojson }}, "
    "\"arguments\": {% if c.function.arguments is string %}{{ c.function.arguments }}"
    "{% else %}{{ c.function.arguments | tojson }}{% endif %}}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


PIECE_CHARS = 2000  # long texts are encoded in pieces of about this many characters


def template_environment() -> ImmutableSandboxedEnvironment:
    """A sandbox that renders a chat template as Hugging Face transformers does, and so vLLM:
    blocks trimmed, `tojson` with keys in their order and no HTML escaping, loop controls,
    raise_exception and strftime_now. A template rendered otherwise gives other tokens."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | str | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message: str) -> NoReturn:
        raise TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception,
                       strftime_now=lambda fmt: datetime.now().strftime(fmt))
    return env


class TextTokenizer:
    """Encodes prompts, renders chats, decodes outputs (incrementally for streams)."""

    def __init__(self, tokenizer: Tokenizer, chat_template: str, fast: bool = False) -> None:
        """`fast`: encode with tiktoken where it gives `tokenizer`'s IDs (bpe_fast); only
        the bundled tokenizers ask, since tests prove the IDs equal for them alone."""
        self.tok = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()
        self.piece_chars = PIECE_CHARS if _cuttable(tokenizer) else None
        fast_pair = fast_encoder(tokenizer) if fast else None
        self.fast_encode: Callable[[str], list[int]] | None = fast_pair[0] if fast_pair else None
        self.fast_encode_text: Callable[[str], list[int]] | None = \
            fast_pair[1] if fast_pair else None
        # a twin that reads special-token strings as text: a message's content is text
        self.plain = Tokenizer.from_str(tokenizer.to_str())
        self.plain.encode_special_tokens = True
        self.specials = tuple(t.content for t in tokenizer.get_added_tokens_decoder().values())
        self.template_source = chat_template
        self.template = template_environment().from_string(chat_template)

    @classmethod
    def load(
        cls, model_dir: str | None = None, chat_template: str | None = None,
        vocab_size: int | None = None,
    ) -> TextTokenizer:
        """The model directory's tokenizer.json / tokenizer_config.json, else a bundled one:
        the realistic tokenizer for a model of `vocab_size` >= REALISTIC_VOCAB, the small
        one otherwise; `chat_template` (a file) overrides the template."""
        realistic = vocab_size is not None and vocab_size >= REALISTIC_VOCAB
        path = REALISTIC_TOKENIZER if realistic else DEFAULT_TOKENIZER
        template, bundled = DEFAULT_CHAT_TEMPLATE, True
        if model_dir and (Path(model_dir) / "tokenizer.json").is_file():
            path, bundled = Path(model_dir) / "tokenizer.json", False
            cfg_path = Path(model_dir) / "tokenizer_config.json"
            if cfg_path.is_file():
                template = json.loads(cfg_path.read_text()).get("chat_template") or template
        if chat_template:
            template = Path(chat_template).read_text()
        return cls(Tokenizer.from_file(str(path)), template, fast=bundled)

    def encode(self, text: str, specials: bool = True) -> list[int]:
        """`text`'s IDs, none added; special-token strings in it as their tokens, or (not
        `specials`) as plain text."""
        fast = self.fast_encode if specials else self.fast_encode_text
        if fast:
            return fast(text)
        tok = self.tok if specials else self.plain
        # the batch "fast" path skips offset tracking, which nothing here uses, and
        # halves a long prompt's CPU; pieces of ~2k characters cost less than one long text
        pieces = _pieces(text, self.piece_chars) if self.piece_chars else [text]
        encoded = tok.encode_batch_fast(pieces, add_special_tokens=False)
        return encoded[0].ids if len(encoded) == 1 else [i for e in encoded for i in e.ids]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The chat as the template writes it; ValueError where the template refuses it (its
        raise_exception, say: roles that do not alternate)."""
        try:
            return self.template.render(
                messages=messages, tools=tools, add_generation_prompt=add_generation_prompt
            )
        except TemplateError as e:
            raise ValueError(f"the chat template refused the request: {e}") from None

    def chat_ids(self, messages: list[dict[str, Any]], tools: list[dict[str,
                 Any]] | None = None) -> list[int]:
        """The chat rendered and encoded, what the messages say read as text: a special-token
        string inside one (`<|im_start|>system` in a user's content, say) becomes plain
        text's tokens, never a control token (HF's split_special_tokens, for the
        messages alone). A chat that holds none is encoded whole, as every server does.
        ValueError where the template does not keep such a message's text apart."""
        held: list[str] = []
        marked = _marked(messages, self.specials, held)
        if not held:
            return self.encode(self.render_chat(messages, tools))
        parts = _SENTINEL.split(self.render_chat(marked, tools))
        if len(parts) != 2 * len(held) + 1 or \
                sorted(int(k) for k in parts[1::2]) != list(range(len(held))):
            raise ValueError("the chat template changes message text that holds special-token "
                             "strings; it cannot be kept apart as text")
        ids: list[int] = []
        for i, part in enumerate(parts):
            ids += self.encode(part) if i % 2 == 0 else self.encode(held[int(part)], False)
        return ids


_SENTINEL = re.compile("\ue000([0-9]+)\ue001")  # private-use marks where a message's text goes


def _marked(value: Any, specials: tuple[str, ...], held: list[str]) -> Any:
    """`value` (messages, nested) with each string that holds a special-token string put
    in `held` and replaced by its sentinel."""
    if isinstance(value, str):
        if any(s in value for s in specials) or "\ue000" in value:
            held.append(value)
            return f"\ue000{len(held) - 1}\ue001"
        return value
    if isinstance(value, dict):
        return {k: _marked(v, specials, held) for k, v in value.items()}
    if isinstance(value, list):
        return [_marked(v, specials, held) for v in value]
    return value


def _cuttable(tok: Tokenizer) -> bool:
    r"""Whether a text may be cut before a space that has a printable ASCII character on
    each side, and its pieces encoded apart, giving the whole text's IDs. True of byte-level
    BPE behind GPT-2's pre-tokenizer regex with no normalizer: no pre-token holds a space
    except as its first character (` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`) or inside a
    whitespace run, BPE never merges across pre-tokens, and special tokens must not strip
    the space after them."""
    pre, model = tok.pre_tokenizer, tok.model
    return (tok.normalizer is None and isinstance(pre, pre_tokenizers.ByteLevel)
            and pre.use_regex and not pre.add_prefix_space
            and isinstance(model, models.BPE) and not model.dropout
            and not any(t.rstrip for t in tok.get_added_tokens_decoder().values()))


def _pieces(text: str, size: int) -> list[str]:
    """`text` cut into pieces of about `size` characters, each cut just before a space with
    a printable ASCII character on either side (the next piece starts with the space)."""
    out, start, end = [], 0, len(text) - 1
    while end - start > size:
        i = text.find(" ", start + size, end)
        while i != -1 and not ("!" <= text[i - 1] <= "~" and "!" <= text[i + 1] <= "~"):
            i = text.find(" ", i + 1, end)
        if i == -1:
            break
        out.append(text[start:i])
        start = i
    out.append(text[start:])
    return out


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas without re-decoding the history.

    Each call decodes only the tokens since the last emitted boundary; text ending
    in an incomplete UTF-8 sequence (U+FFFD) is held back until it completes.
    """

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer
        self.pending: list[int] = []

    def feed(self, new_ids: list[int]) -> str:
        self.pending.extend(new_ids)
        text = self.tokenizer.decode(self.pending)
        if not text.endswith("\ufffd"):
            self.pending = []
            return text
        # emit up to the last whole character; hold the tokens of the unfinished one
        for keep in range(1, min(len(self.pending) - 1, 4) + 1):  # a character is <= 4 bytes
            head = self.tokenizer.decode(self.pending[:-keep])
            if not head.endswith("\ufffd"):
                self.pending = self.pending[-keep:]
                return head
        return ""
