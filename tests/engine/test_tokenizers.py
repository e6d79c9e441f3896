"""The bundled tokenizers: which model gets which, the realistic one's density and round
trips, a model directory's own tokenizer.json, and training that gives the same file from
the same inputs."""

import random
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from advisor.measure.client import WORDS
from engine.core.config import PRESETS
from engine.render.frontend import Frontend, FrontendConfig
from engine.render.tokenizer import (
    REALISTIC_VOCAB,
    SPECIAL_TOKENS,
    THINK_AND_TOOL_TOKENS,
    TextTokenizer,
)

ROOT = Path(__file__).resolve().parents[2]
STRINGS = ["Hello, world!", "naïve café — 東京 🚀", "def f(x):\n    return x ** 2\n",
           "<|im_start|>user\nhi<|im_end|>", "  leading and trailing  ", "tab\tand\nnewline",
           "<think>why</think>answer<tool_call>{\"name\": \"f\"}</tool_call>"]


@pytest.mark.parametrize("model,size", [("tiny", 512), ("small", 512),
                                        ("qwen2.5-7b", REALISTIC_VOCAB),
                                        ("llama-3.1-8b", REALISTIC_VOCAB)])
def test_models_that_mimic_real_ones_get_the_realistic_tokenizer(model, size):
    front = Frontend(FrontendConfig(model_dir=model))
    assert front.tokenizer.vocab_size == size
    assert front.vocab_size == PRESETS[model].vocab_size  # padded to the model's own


def test_the_realistic_tokenizer_round_trips_and_packs_english_like_a_real_one():
    tok = TextTokenizer.load(vocab_size=REALISTIC_VOCAB)
    for s in STRINGS:
        assert tok.tok.decode(tok.encode(s), skip_special_tokens=False) == s
    for special in SPECIAL_TOKENS + THINK_AND_TOOL_TOKENS:
        assert len(tok.encode(special)) == 1, special
    rng = random.Random(0)
    prose = " ".join(rng.choice(WORDS) for _ in range(5000))  # the render benchmark's text
    assert len(prose) / len(tok.encode(prose)) >= 3.5
    small = TextTokenizer.load()
    assert len(small.encode(prose)) > 2 * len(tok.encode(prose))


PIECES = ["word", "it's", "x'll", "42", "3.14", "(a)", "--", "!", "é", "東京", "🚀", "\n", "\t",
          "  ", "   ", "\u00a0", "\u3000", "<|im_end|>", "<think>", "'", "'s"]


@pytest.mark.parametrize("vocab", [None, REALISTIC_VOCAB], ids=["small", "realistic"])
def test_long_texts_encoded_in_pieces_give_the_whole_texts_ids(vocab):
    """Cut before spaces every few characters (the cut is safe only at some spaces: runs,
    non-ASCII neighbours and special tokens around them must not be cut), the IDs are the
    whole text's, as the library gives them in one piece."""
    tok = TextTokenizer.load(vocab_size=vocab)
    tok.fast_encode = None  # the pieces are how a model directory's tokenizer runs
    assert tok.piece_chars
    rng = random.Random(1)
    for trial in range(300):
        text = "".join(rng.choice(PIECES) + rng.choice(["", " ", " ", "  "])
                       for _ in range(rng.randrange(1, 120)))
        whole = tok.tok.encode_batch_fast([text], add_special_tokens=False)[0].ids
        tok.piece_chars = 1 + trial % 9
        assert tok.encode(text) == whole, repr(text)


def test_texts_are_encoded_whole_where_pieces_could_differ(tmp_path):
    prefix_space = Tokenizer(models.BPE())
    prefix_space.pre_tokenizer = pre_tokenizers.Metaspace()
    prefix_space.save(str(tmp_path / "tokenizer.json"))
    assert TextTokenizer.load(str(tmp_path)).piece_chars is None


def test_a_model_directorys_own_tokenizer_is_used(tmp_path):
    own = Tokenizer(models.BPE())
    own.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    own.decoder = decoders.ByteLevel()
    own.add_special_tokens(["<|im_end|>"])
    own.save(str(tmp_path / "tokenizer.json"))
    tok = TextTokenizer.load(str(tmp_path), vocab_size=REALISTIC_VOCAB)
    assert tok.vocab_size == own.get_vocab_size() == 1


def test_training_gives_the_same_file_from_the_same_inputs(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_tokenizer
    finally:
        sys.path.pop(0)
    corpus = sorted((ROOT / "engine" / "render").glob("*.py"))
    a = make_tokenizer.train(corpus, 800, SPECIAL_TOKENS + THINK_AND_TOOL_TOKENS).to_str()
    b = make_tokenizer.train(corpus, 800, SPECIAL_TOKENS + THINK_AND_TOOL_TOKENS).to_str()
    assert a == b
