"""Build the engine's default tokenizer from text this repository holds.

A byte-level BPE over the repo's Markdown and Python files, 512 tokens, so it
fits every preset's vocabulary (the smallest, `tiny`, has 512). Deterministic:
same files, same tokenizer. Writes engine/render/data/tokenizer.json.

Usage: python scripts/make_tokenizer.py
"""

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.render.tokenizer import SPECIAL_TOKENS

ROOT = Path(__file__).resolve().parent.parent


def corpus() -> list[str]:
    files = sorted(p for ext in ("*.md", "*.py") for p in ROOT.rglob(ext)
                   if not any(part.startswith(".") for part in p.relative_to(ROOT).parts))
    return [p.read_text(encoding="utf-8") for p in files]


def main() -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    out = ROOT / "engine" / "render" / "data" / "tokenizer.json"
    tok.save(str(out))
    print(f"wrote {out} ({tok.get_vocab_size()} tokens)")


if __name__ == "__main__":
    main()
