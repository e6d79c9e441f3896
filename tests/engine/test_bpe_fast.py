"""tiktoken as the bundled tokenizers' encoder: the same IDs as `tokenizers` gives, on
the texts the tokenizers were trained on, on random Unicode and on every token; used for
nothing else."""

import random
import shutil
import sysconfig
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from engine.render.bpe_fast import byte_chars, fast_encoder
from engine.render.tokenizer import DEFAULT_TOKENIZER, REALISTIC_VOCAB, TextTokenizer

BUNDLED = pytest.mark.parametrize("vocab", [None, REALISTIC_VOCAB], ids=["small", "realistic"])


def _library(tok: TextTokenizer, text: str) -> list[int]:
    return tok.tok.encode(text, add_special_tokens=False).ids


def _unicode(rng: random.Random, n: int) -> str:
    pools = [(32, 127), (0x80, 0x800), (0x3000, 0x3100), (0x4E00, 0x4F00), (0x1F300, 0x1F600),
             (0, 32)]
    specials = ["<|im_start|>", "<|im_end|>", "<think>", "</tool_call>", "<|endoftext|>"]
    out = []
    for _ in range(n):
        if rng.random() < 0.02:
            out.append(rng.choice(specials))
        else:
            lo, hi = rng.choice(pools)
            out.append(chr(rng.randrange(lo, hi)) * rng.choice([1, 1, 1, 2, 7]))
    return "".join(out)


@BUNDLED
def test_the_bundled_tokenizers_are_encoded_by_tiktoken_to_the_librarys_ids(vocab):
    tok = TextTokenizer.load(vocab_size=vocab)
    assert tok.fast_encode is not None
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    licences = [p for p in sorted(Path("/usr/share/doc").glob("*/copyright"))[::20]
                if p.stat().st_size < 20_000]
    texts = sorted(stdlib.rglob("*.py"))[::200] + licences  # ~0.75 MB in all
    for path in texts:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert tok.encode(text) == _library(tok, text), path
    rng = random.Random(7)
    for _ in range(300):
        text = _unicode(rng, rng.randrange(1, 300))
        assert tok.encode(text) == _library(tok, text), repr(text)
    for run in ("a" * 5000, " " * 5000, "\n" * 999 + "x", "ab" * 2000, "9" * 3000, "é" * 2000):
        assert tok.encode(run) == _library(tok, run)


@BUNDLED
def test_every_token_of_the_bundled_vocabularies_encodes_to_itself(vocab):
    """tiktoken takes a piece that is a whole token at once; the merges must arrive there."""
    tok = TextTokenizer.load(vocab_size=vocab)
    chars = byte_chars()
    specials = {a.content for a in tok.tok.get_added_tokens_decoder().values()}
    for text, i in tok.tok.get_vocab(with_added_tokens=False).items():
        if text in specials:
            continue
        assert [t.id for t in tok.tok.model.tokenize(text)] == [i], repr(text)
        as_text = bytes(chars[c] for c in text).decode("utf-8", "replace")
        assert tok.encode(as_text) == _library(tok, as_text), repr(text)


def test_a_model_directorys_tokenizer_is_never_encoded_by_tiktoken(tmp_path):
    shutil.copy(DEFAULT_TOKENIZER, tmp_path / "tokenizer.json")  # one tiktoken could run
    assert fast_encoder(Tokenizer.from_file(str(tmp_path / "tokenizer.json"))) is not None
    assert TextTokenizer.load(str(tmp_path)).fast_encode is None


def test_tokenizers_tiktoken_cannot_reproduce_get_none():
    metaspace = Tokenizer(models.BPE())
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace()
    assert fast_encoder(metaspace) is None
    alphabet = {c: i for i, c in enumerate(sorted(byte_chars()))}
    n = len(alphabet)
    # "ab" is merged after "bc" but has the lower id: ids do not rank the merges
    vocab = alphabet | {"ab": n, "bc": n + 1}
    out_of_order = Tokenizer(models.BPE(vocab, [("b", "c"), ("a", "b")]))
    out_of_order.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert fast_encoder(out_of_order) is None
