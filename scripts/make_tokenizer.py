"""Build the engine's tokenizers, deterministically, from text that lies on any machine:
`small` (engine/render/data/tokenizer.json), byte-level BPE of 512 tokens over this
repository's Markdown and Python, for the test and demo presets; `realistic`
(engine/render/data/tokenizer-32k.json), 32,768 tokens over the Python standard library's
sources and the licence texts Debian ships, with chat, reasoning and tool-call special
tokens, for presets that mimic real models. Files are read in sorted order and training
runs on one thread, so the same inputs give the same file; it is committed, since another
machine's standard library would give another one.

Usage: python scripts/make_tokenizer.py [small|realistic]
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # NOTE: before tokenizers starts its pool

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.render.tokenizer import (
    DEFAULT_TOKENIZER,
    REALISTIC_TOKENIZER,
    REALISTIC_VOCAB,
    SPECIAL_TOKENS,
    THINK_AND_TOOL_TOKENS,
)

ROOT = Path(__file__).resolve().parent.parent


def repo_corpus() -> list[Path]:
    return sorted(p for ext in ("*.md", "*.py") for p in ROOT.rglob(ext)
                  if not any(part.startswith(".") for part in p.relative_to(ROOT).parts))


def machine_corpus() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = sorted(p for p in stdlib.rglob("*.py")
                  if not {"site-packages", "test", "tests", "idlelib"} & set(p.parts))
    licenses = sorted(Path("/usr/share/common-licenses").glob("*"))
    copyrights = sorted(Path("/usr/share/doc").glob("*/copyright"))
    return code + [p for p in licenses + copyrights if p.is_file()]


def texts(paths: list[Path]):
    for p in paths:
        yield p.read_text(encoding="utf-8", errors="replace")


def train(paths: list[Path], vocab: int, special: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts(paths), trainer=trainer)
    return tok


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "small"
    if which == "small":
        tok, out = train(repo_corpus(), 512, SPECIAL_TOKENS), DEFAULT_TOKENIZER
    elif which == "realistic":
        tok = train(machine_corpus(), REALISTIC_VOCAB, SPECIAL_TOKENS + THINK_AND_TOOL_TOKENS)
        out = REALISTIC_TOKENIZER
    else:
        sys.exit(f"usage: {sys.argv[0]} [small|realistic]")
    tok.save(str(out))
    print(f"wrote {out} ({tok.get_vocab_size()} tokens, {out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
