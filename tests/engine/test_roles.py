"""Prefill/decode roles: KV export from one instance, import into another."""

import pytest

from engine import KVImportError, SamplingParams
from tests.engine.helpers import assert_no_leaks, make_llm, random_prompts

PARAMS = [SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True),
          SamplingParams(max_tokens=10, temperature=0.8, top_k=40, seed=11, ignore_eos=True)]


def disaggregated(prompts, params, **decode_kw):
    prefill = make_llm(role="prefill")
    firsts = prefill.generate(prompts, params)
    assert all(o.finish_reason == "remote_decode" and len(o.token_ids) == 1 for o in firsts)
    payloads = [prefill.export_kv(o.request_id) for o in firsts]
    for o in firsts:
        prefill.engine.release_kv(o.request_id)
    assert_no_leaks(prefill)
    decode = make_llm(role="decode", **decode_kw)
    return decode, decode.generate(prompts, params, kv=payloads), payloads


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "seeded"])
def test_export_import_continues_token_identically(params):
    prompts = random_prompts(4, (1, 70), seed=8)
    collocated = make_llm().generate(prompts, params)
    decode, outs, payloads = disaggregated(prompts, params, block_size=8)  # block sizes differ
    assert [o.token_ids for o in outs] == [o.token_ids for o in collocated]
    assert all(o.num_cached_tokens == len(p) - 1 for o, p in zip(outs, prompts))
    cfg = decode.config
    for p, kv in zip(prompts, payloads):
        assert (
            kv.nbytes
            == cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * 4 * len(p)
        )
    assert_no_leaks(decode)


def test_import_of_kv_for_other_tokens_fails_or_recomputes_by_policy():
    prompts = random_prompts(2, (20, 30), seed=9)
    params = PARAMS[0]
    prefill = make_llm(role="prefill")
    first = prefill.generate([prompts[0]], params)[0]
    wrong = prefill.export_kv(first.request_id)  # KV of prompt 0, offered for prompt 1
    with pytest.raises(KVImportError, match="different tokens"):
        make_llm(role="decode").generate([prompts[1]], params, kv=[wrong])
    recompute = make_llm(role="decode", kv_load_failure_policy="recompute")
    out = recompute.generate([prompts[1]], params, kv=[wrong])[0]
    assert out.token_ids == make_llm().generate([prompts[1]], params)[0].token_ids
    assert recompute.engine.num_kv_import_failures == 1


def test_held_kv_is_freed_at_lease_expiry():
    llm = make_llm(role="prefill", kv_lease_duration=30.0)
    out = llm.generate(random_prompts(1, (40, 40)), PARAMS[0])[0]
    bm = llm.engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks - 3
    expires = llm.engine.held.expires_at(out.request_id)
    assert llm.engine.expire_leases(now=expires - 1) == []
    assert llm.engine.expire_leases(now=expires) == [out.request_id]
    assert_no_leaks(llm)
    with pytest.raises(KeyError):
        llm.export_kv(out.request_id)


def test_abort_frees_blocks_everywhere():
    llm = make_llm(max_num_batched_tokens=16)
    eng = llm.engine
    ids = [eng.add_request(p, PARAMS[0]) for p in random_prompts(3, (30, 40))]
    eng.step()
    eng.step()
    assert eng.block_manager.num_free_blocks < eng.block_manager.num_blocks
    for rid in ids:
        assert eng.abort(rid)
    assert not eng.abort("never-seen")
    assert_no_leaks(llm)


def test_a_caller_cancelled_while_its_request_is_admitted_still_aborts_it():
    """The engine thread is busy when the request is queued; its caller gives up before
    it is admitted: the request must not run on to max_tokens for nobody."""
    import asyncio
    import threading

    from engine.core.sequence import SamplingParams
    from engine.serve.async_engine import AsyncEngine

    llm = make_llm()
    aengine = AsyncEngine(llm.engine)
    gate = threading.Event()
    aengine.submit(lambda: gate.wait(5))  # the engine thread is held here

    async def give_up():
        stream = aengine.generate([5, 6, 7], SamplingParams(max_tokens=2000, ignore_eos=True),
                                  "late")  # seconds of decoding, were it left to run
        task = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()  # the engine thread admits the request, then finds its abort
        for _ in range(100):  # 1 s: well under the 2000 steps' time
            await asyncio.sleep(0.01)
            if not llm.engine.has_unfinished():
                break

    try:
        asyncio.run(give_up())
        assert not llm.engine.has_unfinished() and "late" not in llm.engine.requests
    finally:
        gate.set()
        aengine.close()
    assert_no_leaks(llm)
