"""Shared test helpers for the engine tests."""

import random

from engine.llm import LLM


def make_llm(**kw) -> LLM:
    """A float32 tiny engine (seed 0) with overridable options."""
    opts = {"model": "tiny", "seed": 0, "device": "cpu", "dtype": "float32", "block_size": 16}
    opts.update(kw)
    return LLM(**opts)


def random_prompts(n: int, lengths: tuple[int, int], vocab: int = 512, seed: int = 0):
    """n prompts of random token ids (>= 3, clear of tiny's EOS) with lengths in `lengths`."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(*lengths))] for _ in range(n)]


def assert_no_leaks(llm: LLM) -> None:
    """Every block is free (cached or not) and nothing is held or queued."""
    eng = llm.engine
    bm = eng.block_manager
    assert not eng.has_unfinished()
    assert not eng.held
    assert bm.num_free_blocks == bm.num_blocks
    assert all(b.ref_count == 0 for b in bm.blocks)
