"""A faster encoder for the bundled byte-level BPE tokenizers: the same vocabulary and merges
run by `tiktoken` (~5x less CPU than `tokenizers`). The two merge by different rules and
agree only where the vocabulary makes those the same choices, which is checked here and by
the tests; a model directory's tokenizer always runs in `tokenizers`."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import tiktoken
from tokenizers import Tokenizer, models, pre_tokenizers

# GPT-2's pre-tokenizer pattern: what tokenizers' ByteLevel(use_regex=True) splits on
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# NOTE: a cheap guard, not the proof (the tests are): a twin that differs here is not used
PROBE = (
    "<|im_start|>user\nHello, world! It's 2026: 3.14159 x 10^3... \t  spaces   \n\n"
    "naïve café, 東京, emoji 🎉, <think>why?</think><tool_call>{\"a\": [1, 2]}</tool_call>"
    "<|im_end|>\n'll 've 're 'd 'm 's 't aaaaaaaaaaaaaaaaa      \n"
)


def byte_chars() -> dict[str, int]:
    """Byte-level BPE's alphabet: the printable character that stands for each byte."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]  # mapped past 255, in byte order
    return {chr(b): b for b in kept} | {chr(256 + i): b for i, b in enumerate(moved)}


def fast_encoder(tok: Tokenizer) -> tuple[Callable[[str], list[int]],
                                          Callable[[str], list[int]]] | None:
    """`tok`'s encode run by tiktoken, twice: special-token strings as their tokens (none
    added), and special-token strings as plain text; None where `tok` is plainly not one
    tiktoken can reproduce (see the module's note for what only tests can tell)."""
    pre = tok.pre_tokenizer
    if not (tok.normalizer is None and isinstance(tok.model, models.BPE)
            and not tok.model.dropout and isinstance(pre, pre_tokenizers.ByteLevel)
            and pre.use_regex and not pre.add_prefix_space):
        return None
    added = tok.get_added_tokens_decoder()
    if any(t.lstrip or t.rstrip or t.single_word for t in added.values()):
        return None
    specials = {t.content: i for i, t in added.items()}
    vocab = tok.get_vocab(with_added_tokens=False)
    if not _ranked_by_merge_order(tok, vocab):
        return None
    chars = byte_chars()
    if not all(c in vocab for c in chars):  # tiktoken starts from every single byte
        return None
    try:
        ranks = {bytes(chars[c] for c in s): i for s, i in vocab.items() if s not in specials}
    except KeyError:  # a token outside the byte alphabet: not byte-level after all
        return None
    enc = tiktoken.Encoding("advisor-bundled", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens=specials)

    def encode(text: str) -> list[int]:
        return enc.encode(text, allowed_special="all")

    def encode_text(text: str) -> list[int]:
        return enc.encode(text, allowed_special=set(), disallowed_special=())

    same = encode(PROBE) == tok.encode(PROBE, add_special_tokens=False).ids
    return (encode, encode_text) if same else None


def _ranked_by_merge_order(tok: Tokenizer, vocab: dict[str, int]) -> bool:
    """Whether each merge makes a token no earlier merge made, with ids that grow with the
    merges' order: then a token's id ranks it as its merge does."""
    merges = json.loads(tok.to_str())["model"]["merges"]
    made = [vocab.get("".join(m if isinstance(m, list) else m.split(" ", 1))) for m in merges]
    ids = [i for i in made if i is not None]
    return len(ids) == len(made) and all(a < b for a, b in itertools.pairwise(ids))
