"""A decoder keeps a finished turn's KV (prompt + reply) for its conversation's next turn;
a prefix of it, imported elsewhere, continues token-identically; keeping never starves
running requests."""

import pytest

from engine import SamplingParams
from tests.engine.helpers import assert_no_leaks, make_llm, random_prompts

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def run(llm, prompt, keep_as=None, kv=None):
    rid = llm.engine.add_request(prompt, GREEDY, kv=kv, keep_as=keep_as)
    while True:
        for out in llm.engine.step():
            if out.request_id == rid and out.finished:
                return out


def common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("diverge_at", [None, 20], ids=["same-history", "edited-history"])
def test_a_kept_turn_serves_the_next_turns_prefix_token_identically(diverge_at):
    decoder = make_llm(role="decode", keep_conversations=True)
    prompt1 = random_prompts(1, (50, 50), seed=3)[0]
    reply1 = run(decoder, prompt1, keep_as="c").token_ids
    kept = decoder.engine.export_kv("conv:c")
    assert kept.token_ids == prompt1 + reply1[:-1]  # the last token was sampled, not computed
    prompt2 = prompt1 + reply1 + random_prompts(1, (30, 30), seed=4)[0]
    if diverge_at is not None:  # a template that dropped something: the tail differs
        prompt2[diverge_at] = (prompt2[diverge_at] + 1) % 500 + 3
    m = common_prefix(kept.token_ids, prompt2)
    assert m == (len(kept.token_ids) if diverge_at is None else diverge_at)
    fresh = run(make_llm(), prompt2)
    reused = run(make_llm(role="both"), prompt2, kv=kept.prefix(m))
    assert reused.token_ids == fresh.token_ids
    assert reused.num_cached_tokens == m


@pytest.mark.parametrize("evicted", [False, True], ids=["cached", "evicted-meanwhile"])
def test_a_tail_payload_completes_the_prefix_cache_token_identically(evicted):
    """What a prefiller gets when it asks only for what its prefix cache lacks: KV from a
    whole block on, the tokens before taken from its own cache; if that cache lost them
    before the request was admitted, the payload is dropped and all is computed."""
    decoder = make_llm(role="decode", keep_conversations=True)
    prompt1 = random_prompts(1, (50, 50), seed=3)[0]
    reply1 = run(decoder, prompt1, keep_as="c").token_ids
    kept = decoder.engine.export_kv("conv:c")
    prompt2 = prompt1 + reply1 + random_prompts(1, (30, 30), seed=4)[0]
    prefiller = make_llm(role="both", num_kv_blocks=12)
    run(prefiller, prompt1)  # its prefix cache: prompt 1's full blocks
    bs = prefiller.engine.block_manager.block_size
    have = prefiller.engine.cached_prefix_len(prompt2)
    assert have == len(prompt1) // bs * bs
    if evicted:  # another request takes the whole pool meanwhile
        run(prefiller, random_prompts(1, (12 * bs - 8, 12 * bs - 8), seed=9)[0])
    tail = kept.prefix(len(kept.token_ids))
    tail.kv, tail.start = tail.kv[:, :, have:], have
    out = run(prefiller, prompt2, kv=tail)
    assert out.token_ids == run(make_llm(), prompt2).token_ids
    assert out.num_cached_tokens == (0 if evicted else len(kept.token_ids))


def test_the_next_turn_replaces_the_kept_one_and_the_lease_frees_it():
    decoder = make_llm(role="decode", keep_conversations=True, decoder_kv_ttl=480.0)
    eng = decoder.engine
    p = random_prompts(2, (40, 40), seed=5)
    run(decoder, p[0], keep_as="c")
    first = eng.kept.leases.num_blocks()
    run(decoder, p[1] + p[1], keep_as="c")
    assert len(eng.kept.leases) == 1 and eng.kept.leases.num_blocks() > first
    assert eng.expire_leases(now=eng.kept.leases.expires_at("conv:c") + 1) == ["conv:c"]
    assert_no_leaks(decoder)


def test_keeping_stays_within_its_budget_and_never_starves_a_request():
    decoder = make_llm(role="decode", keep_conversations=True, num_kv_blocks=12,
                       decoder_kv_blocks=8)
    eng = decoder.engine
    p = random_prompts(3, (40, 40), seed=6)  # 40 + 8 tokens: 3 blocks each
    run(decoder, p[0], keep_as="a")
    run(decoder, p[1], keep_as="b")
    assert eng.kept.leases.num_blocks() == 6
    run(decoder, p[2], keep_as="c")  # 9 > 8: the least recently used ("a") goes
    assert eng.kept.evicted_total == 1 and eng.kept.leases.get("conv:a") is None
    big = random_prompts(1, (150, 150), seed=7)[0]  # 158 tokens: 10 of the 12 blocks
    assert len(run(decoder, big).token_ids) == 8  # kept turns made room for it
    assert eng.kept.evicted_total >= 2
    too_big = make_llm(role="decode", keep_conversations=True, decoder_kv_blocks=2)
    run(too_big, p[0], keep_as="x")  # 3 blocks over a budget of 2: not kept at all
    assert_no_leaks(too_big)


def test_a_turn_finishing_while_the_previous_one_is_pulled_never_leaks_it():
    decoder = make_llm(role="decode", keep_conversations=True)
    eng = decoder.engine
    p = random_prompts(2, (40, 40), seed=8)
    run(decoder, p[0], keep_as="c")
    with eng.kept.leases.reading("conv:c") as old:  # a pull of turn 1 in progress
        run(decoder, p[1], keep_as="c")  # turn 2 finishes meanwhile: it is not kept
        assert eng.kept.leases.get("conv:c") is old
    eng.expire_leases(now=eng.kept.leases.expires_at("conv:c") + 1)
    assert_no_leaks(decoder)
