"""Greedy output of the paged engine equals a naive full-recompute reference."""

import pytest

from engine import SamplingParams
from tests.engine.helpers import assert_no_leaks, make_llm, random_prompts
from tests.engine.reference import reference_greedy

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def expected(ref, prompts, max_tokens=8):
    sd, cfg = ref
    return [reference_greedy(sd, cfg, p, max_tokens) for p in prompts]


@pytest.mark.parametrize("budget,chunked", [(32, True), (7, True), (2048, False)])
def test_chunked_prefill_matches_reference(tiny_reference, budget, chunked):
    prompts = random_prompts(6, (1, 90), seed=budget)
    llm = make_llm(max_num_batched_tokens=budget, enable_chunked_prefill=chunked)
    outs = llm.generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == expected(tiny_reference, prompts)
    assert_no_leaks(llm)


def test_prefix_cache_hits_match_reference(tiny_reference):
    base = random_prompts(1, (40, 40), seed=1)[0]
    tails = random_prompts(3, (1, 20), seed=2)
    prompts = [base + t for t in tails] + [base + tails[0], base]
    llm = make_llm(block_size=8)
    outs = [llm.generate([p], GREEDY)[0] for p in prompts]  # one at a time: later ones hit
    assert [o.token_ids for o in outs] == expected(tiny_reference, prompts)
    assert outs[0].num_cached_tokens == 0
    assert all(o.num_cached_tokens >= 40 for o in outs[1:4])
    assert outs[4].num_cached_tokens == 32  # last token never comes from the cache: 39 -> 32
    assert_no_leaks(llm)


def test_a_next_turn_reuses_the_blocks_of_the_reply_too(tiny_reference):
    """As vLLM v1 does: a finished request's generated tokens stay cached with its prompt,
    so a conversation's next turn (prompt, reply, new message) computes only what is new."""
    first = random_prompts(1, (37, 37), seed=5)[0]
    llm = make_llm(block_size=8)
    reply = llm.generate([first], GREEDY)[0].token_ids  # 37 + 8 = 45 tokens: 5 full blocks
    second = [*first, *reply, *random_prompts(1, (9, 9), seed=6)[0]]
    out = llm.generate([second], GREEDY)[0]
    assert out.token_ids == expected(tiny_reference, [second])[0]
    # the last generated token was sampled, never computed: 44 computed, 5 blocks of 8
    assert out.num_cached_tokens == 40
    assert_no_leaks(llm)


def test_batch_of_mixed_lengths_equals_each_alone():
    prompts = random_prompts(8, (1, 120), seed=3)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    batched = make_llm(max_num_batched_tokens=64).generate(prompts, params)
    alone = [make_llm(enable_prefix_caching=False).generate([p], params)[0] for p in prompts]
    assert [o.token_ids for o in batched] == [o.token_ids for o in alone]


def test_preemption_under_a_tiny_pool_matches_reference(tiny_reference):
    prompts = random_prompts(5, (10, 30), seed=4)
    llm = make_llm(block_size=4, num_kv_blocks=14, max_num_batched_tokens=64)
    outs = llm.generate(prompts, GREEDY)
    assert sum(o.num_preemptions for o in outs) > 0
    assert [o.token_ids for o in outs] == expected(tiny_reference, prompts)
    assert_no_leaks(llm)


def test_seeded_sampling_is_reproducible_and_batch_independent():
    prompts = random_prompts(4, (5, 40), seed=5)
    params = SamplingParams(max_tokens=10, temperature=0.9, top_p=0.9, top_k=50, seed=7,
                            ignore_eos=True)
    a = make_llm().generate(prompts, params)
    b = [make_llm().generate([p], params)[0] for p in prompts]
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    greedy = make_llm().generate(prompts, GREEDY)
    assert [o.token_ids[:8] for o in a] != [o.token_ids for o in greedy]
