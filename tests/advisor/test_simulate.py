"""The planner's simulator against ground truth: a lone request's timeline from its step
model, queueing as M/D/1 theory has it, transfers sharing a link, a full KV cache making
requests wait, and the roofline and fitted step models against hand arithmetic."""

import numpy as np
import pytest

from advisor.plan import hardware
from advisor.plan.simulate import simulate
from advisor.plan.steptime import FittedStep, RooflineStep, Step, fit, prefill_step
from advisor.plan.system import EngineSpec, SimRequest, System
from advisor.probe.links import Link
from advisor.probe.shapes import shape_of
from advisor.rundata.evidence import Calibration

FLAT = FittedStep(prefill_base_ms=10.0, prefill_ms_per_token=0.1, decode_base_ms=5.0,
                  decode_ms_per_token=1.0, ms_per_pair=0.0, source="test")
LINK = Link("test", 1.0, 0.0, 0.0, "test")  # 1 GB/s, nothing else


def engine(step=FLAT, kv_tokens=10**6, budget=2048, chunked=True) -> EngineSpec:
    return EngineSpec(step, kv_tokens, budget, 256, chunked)


def gaps_ms(rec) -> np.ndarray:
    return np.diff(rec.chunks) * 1000


def test_a_lone_request_takes_its_prefill_then_one_decode_step_per_token():
    (rec,) = simulate(System((engine(),), front_ms=2.0), [SimRequest(0.0, 100, 5)]).records
    assert rec.ok and rec.output_tokens == len(rec.chunks) == 5
    assert (rec.chunks[0] - rec.sent) * 1000 == pytest.approx(2.0 + 10 + 0.1 * 100)
    assert gaps_ms(rec) == pytest.approx([5.0 + 1.0] * 4)  # batch 1: base + one token


def test_chunked_prefill_stalls_running_decodes_for_the_chunk():
    # request 0 decodes alone; request 1's 1000-token prompt comes in two 512-token chunks
    reqs = [SimRequest(0.0, 10, 40), SimRequest(0.05, 1000, 2)]
    recs = simulate(System((engine(budget=512),), front_ms=0.0), reqs).records
    g = gaps_ms(recs[0])
    # the larger fixed cost once, the chunk's prompt tokens, one decode: 511 then 489 tokens
    chunks = [10 + 0.1 * 511 + 1.0, 10 + 0.1 * 489 + 1.0]
    stalled = int(np.argmax(g))
    assert g[stalled:stalled + 3] == pytest.approx([*chunks, 5 + 2.0])  # then a batch of 2
    assert np.median(g) == pytest.approx(6.0)


def test_prefill_queueing_matches_m_d_1_theory():
    """A prefiller serving one prompt per step (deterministic S) under Poisson arrivals:
    mean wait lambda S^2 / (2 (1 - rho)) (Pollaczek-Khinchine)."""
    s_ms = 10 + 0.1 * 400  # 50 ms per prompt
    lam = 12.0  # rho 0.6
    rng = np.random.default_rng(1)
    arrivals = np.cumsum(rng.exponential(1 / lam, 20000))
    reqs = [SimRequest(float(a), 400, 1) for a in arrivals]
    pre = engine(budget=400, chunked=False)
    system = System(decode=(engine(),), prefill=(pre,), link=LINK, kv_bytes=lambda t: 0,
                    front_ms=0.0, proxy_ms=0.0)
    out = simulate(system, reqs)
    ttft = np.array([(r.chunks[0] - r.sent) * 1000 for r in out.records])
    # TTFT = wait + service + the decoder's step computing the last prompt token
    decoder_step = 5 + 1.0
    expected_wait = lam * (s_ms / 1000) ** 2 / (2 * (1 - lam * s_ms / 1000)) * 1000
    got_wait = ttft.mean() - s_ms - decoder_step
    assert got_wait == pytest.approx(expected_wait, rel=0.08)


def test_a_decoder_takes_in_a_transferred_prompt_with_a_decode_steps_work():
    """The prompt's last token, computed on the decoder over the transferred KV, is one
    query row as a decode's is: a decode step, not a prefill's larger fixed cost."""
    system = System(decode=(engine(),), prefill=(engine(),), link=LINK,
                    kv_bytes=lambda t: 2e6 * t, front_ms=1.0, proxy_ms=3.0)
    (rec,) = simulate(system, [SimRequest(0.0, 100, 3)]).records
    # hop, the prompt's prefill, 200 MB at 1 GB/s after the proxy's hop, one decode
    ttft_ms = 1 + 3 + (10 + 0.1 * 100) + 3 + 200 + (5 + 1.0)
    assert (rec.chunks[0] - rec.sent) * 1000 == pytest.approx(ttft_ms)
    assert gaps_ms(rec) == pytest.approx([5 + 1.0] * 2)


def test_transfers_into_one_decoder_queue_on_its_link():
    # two prompts finish prefill on two prefillers at the same moment; 100 MB each at 1 GB/s
    reqs = [SimRequest(0.0, 100, 2), SimRequest(0.0, 100, 2)]
    system = System(decode=(engine(),), prefill=(engine(), engine()), link=LINK,
                    kv_bytes=lambda t: 100e6, front_ms=0.0, proxy_ms=0.0)
    out = simulate(system, reqs)
    assert sorted(out.transfers_s) == pytest.approx([0.1, 0.1])
    firsts = sorted(r.chunks[0] for r in out.records)
    assert firsts[1] - firsts[0] == pytest.approx(0.1, abs=0.01)  # the second waited
    assert out.transfer_bytes == 200e6


def test_a_full_kv_cache_makes_the_next_request_wait_never_fail():
    reqs = [SimRequest(0.0, 100, 50), SimRequest(0.001, 100, 50)]
    recs = simulate(System((engine(kv_tokens=200),), front_ms=0.0), reqs).records
    assert all(r.ok for r in recs)
    assert recs[1].chunks[0] >= recs[0].chunks[-1]  # admitted once the first freed its KV
    (too_big,) = simulate(System((engine(kv_tokens=100),)), [SimRequest(0.0, 100, 50)]).records
    assert not too_big.ok and "KV" in too_big.error


def test_arrivals_cut_a_run_of_decode_steps_exactly_where_a_step_ends():
    """Decode-only steps are planned ahead; later arrivals must still join at the next step
    boundary, and every request gets exactly its tokens, in order."""
    rng = np.random.default_rng(3)
    reqs = [SimRequest(float(a), int(p), int(o)) for a, p, o in zip(
        np.cumsum(rng.exponential(0.05, 300)), rng.integers(10, 300, 300),
        rng.integers(1, 80, 300))]
    out = simulate(System((engine(), engine()), front_ms=0.0), reqs)
    for r, q in zip(out.records, reqs):
        assert r.ok and len(r.chunks) == q.output
        assert all(b > a for a, b in zip(r.chunks, r.chunks[1:]))
        assert r.chunks[0] > r.sent
    # batch sizes only change at a request's first or last token: every gap is a whole step
    gaps = np.concatenate([gaps_ms(r) for r in out.records if len(r.chunks) > 1])
    assert gaps.min() >= 6.0 - 1e-6


class _TwoLines:
    """A step model bound by one line of the context, then another (as a roofline turns
    from compute- to memory-bound): convex, with its kink at 300 tokens."""

    def ms(self, s: Step) -> float:
        if s.prefill_tokens:
            return 10.0
        return np.maximum(40.0 - 0.05 * s.kv_read_tokens, 16.0 + 0.03 * s.kv_read_tokens)


def test_a_run_of_decode_steps_across_a_kink_in_the_step_model_keeps_each_steps_time():
    """Decode-only steps are summed in closed form where their time is one line of the
    context: a run that crosses from one bound to the other must still give every step
    its own time (the first decode step reads the prompt and its first token)."""
    (rec,) = simulate(System((engine(_TwoLines()),), front_ms=0.0),
                      [SimRequest(0.0, 200, 300)]).records
    context = 201 + np.arange(299)  # [299] KV tokens each decode step reads
    want = np.maximum(40.0 - 0.05 * context, 16.0 + 0.03 * context)
    assert gaps_ms(rec) == pytest.approx(want, rel=1e-9)


def test_tensor_parallel_steps_pay_two_all_reduces_a_layer_on_their_fabric():
    shape, g = shape_of("qwen2.5-7b"), hardware.gpu("L40S")
    fabric = Link("fabric", 10.0, 0.01, 0.0, "test")  # 10 GB/s, 10 us
    one, two = RooflineStep(shape, g), RooflineStep(shape, g, tp=2, fabric=fabric)
    for s in (Step(decodes=1), prefill_step(1000)):
        tokens = s.decodes + s.prefill_tokens
        per = 0.01 + tokens * shape.hidden * 2 * 2 * (1 / 2) / 10e9 * 1000  # ms, ring of 2
        # the rest is one GPU's time with the weights, KV and FLOPs split over two
        alone = (one.ms(s) - 1.5) / 2 + 1.5
        assert two.ms(s) == pytest.approx(alone + 2 * shape.layers * per, rel=1e-9)


def test_roofline_decode_is_the_weight_read_and_prefill_the_flops():
    shape, g = shape_of("qwen2.5-7b"), hardware.gpu("L40S")
    step = RooflineStep(shape, g)
    weights = shape.weight_bytes()
    assert weights == pytest.approx(15.23e9, rel=0.01)  # 7.6B parameters in bf16
    read_ms = weights / (864e9 * 0.8) * 1000
    assert step.ms(Step(decodes=1)) == pytest.approx(1.5 + read_ms, rel=1e-6)
    flops = 2 * shape.active_params * 8192 + shape.attention_flops_per_pair() * 8192 * 8193 / 2
    pre = step.ms(prefill_step(8192))
    assert pre == pytest.approx(1.5 + flops / (362e12 * 0.6) * 1000, rel=1e-6)
    # a decode step's time stays near the weight read up to large batches (memory-bound)
    assert step.ms(Step(decodes=32, pairs=32 * 1000, kv_read_tokens=32 * 1000)) < 1.2 * step.ms(
        Step(decodes=1))


def test_fit_recovers_a_known_engine_from_its_calibration():
    truth = FittedStep(20.0, 0.15, 18.0, 0.6, 2e-5, "truth")
    prompts = [64, 256, 1024]
    cal = Calibration(prompts, [truth.ms(prefill_step(p)) for p in prompts], [1, 8],
                      [truth.ms(Step(decodes=b, pairs=b * 28, kv_read_tokens=b * 28))
                       for b in (1, 8)], 0.15, 20.0, "bfloat16", "collocated-2")
    got = fit(cal)
    for name in ("prefill_base_ms", "prefill_ms_per_token", "decode_base_ms",
                 "decode_ms_per_token", "ms_per_pair"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-3), name


def _batch_2_over_the_line(extra_ms: float = 15.0):
    """(truth, its steps at batch 1, 2 and 8 with `extra_ms` on batch 2, the fit of a
    calibration that timed those): as on the Zen 3 (float32), where 2 requests stepped
    ~1.7x 1 and 8 ~2.3x."""
    truth = FittedStep(20.0, 0.15, 18.0, 0.6, 2e-5, "truth")
    prompts = [64, 256, 1024]
    steps = [truth.ms(Step(decodes=b, pairs=b * 28)) + (extra_ms if b == 2 else 0.0)
             for b in (1, 2, 8)]
    cal = Calibration(prompts, [truth.ms(prefill_step(p)) for p in prompts], [1, 2, 8], steps,
                      0.15, 20.0, "float32", "collocated-2")
    return truth, steps, fit(cal)


def test_a_batch_timed_between_the_ends_keeps_its_own_step():
    """The line still goes through batch 1 and 8 exactly (a prefill step shares its fixed
    cost); the fitted step also goes through batch 2's time, linear in excess from 2 to 8,
    and keeps the line beyond 8."""
    truth, steps, got = _batch_2_over_the_line(15.0)
    for name in ("decode_base_ms", "decode_ms_per_token"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-3), name
    for b, want in zip((1, 2, 8), steps):
        assert got.ms(Step(decodes=b, pairs=b * 28)) == pytest.approx(want, rel=1e-3), b
    at = {b: truth.ms(Step(decodes=b, pairs=b * 28)) for b in (5, 16)}
    assert got.ms(Step(decodes=5, pairs=5 * 28)) == pytest.approx(at[5] + 7.5, rel=1e-3)
    assert got.ms(Step(decodes=16, pairs=16 * 28)) == pytest.approx(at[16], rel=1e-3)
    # a run of decode-only steps at batch 2 (arrays of context): each step pays it
    runs = got.ms(Step(2, 0, np.array([56.0, 58.0]), np.array([56.0, 58.0])))
    assert runs[0] == pytest.approx(steps[1], rel=1e-3)


def test_two_decodes_beside_a_prompt_chunk_pay_no_small_batch_extra():
    """The extra is the kernels' at that many rows: 2 decodes and a 30-token chunk are a
    32-row step, which the line prices (as the calibration's TTFTs and batch 8 do)."""
    truth, _, got = _batch_2_over_the_line(15.0)
    mixed = Step(2, 30, 2 * 28 + prefill_step(30).pairs, 2 * 28 + 30)
    assert got.ms(mixed) == pytest.approx(truth.ms(mixed), rel=1e-3)


def test_step_jitter_spreads_gaps_as_a_lognormal_of_that_sigma():
    # one long request alone: its gaps are the decode step times a lognormal factor
    jittery = EngineSpec(FLAT, 10**6, jitter=0.2)
    (rec,) = simulate(System((jittery,), front_ms=0.0), [SimRequest(0.0, 10, 20001)]).records
    g = gaps_ms(rec)
    assert np.median(g) == pytest.approx(6.0, rel=0.02)
    assert np.percentile(g, 99) / np.median(g) == pytest.approx(np.exp(2.326 * 0.2), rel=0.03)
    again = simulate(System((jittery,), front_ms=0.0), [SimRequest(0.0, 10, 20001)]).records
    assert again[0].chunks == rec.chunks  # seeded: the same run twice


def test_a_step_100_times_longer_than_a_decode_step_spreads_10_times_less():
    jittery = EngineSpec(FLAT, 10**6, 8192, jitter=0.2)
    # lone prompts far apart: each TTFT is one prefill step of 10 + 0.1 x 5950 = 605 ms
    reqs = [SimRequest(2.0 * i, 5950, 1) for i in range(4000)]
    ttft = [(r.chunks[0] - r.sent) * 1000 for r in simulate(
        System((jittery,), front_ms=0.0), reqs).records]
    assert np.median(ttft) == pytest.approx(605.0, rel=0.01)
    assert np.std(np.log(ttft)) == pytest.approx(0.2 * np.sqrt(6.0 / 605.0), rel=0.05)


def test_an_engines_first_step_after_it_idled_pays_the_wake_up_curve():
    wake = ((0.0, 0.0, 0.0), (0.1, 20.0, 0.0), (1.0, 200.0, 0.0))
    # request 1 arrives while request 0's prefill runs, so it steps on without waking;
    # request 2 finds the engine idle for ~0.7 s after request 1's last token
    reqs = [SimRequest(0.0, 100, 5), SimRequest(0.01, 100, 5), SimRequest(1.0, 100, 5)]
    lone = 10 + 0.1 * 100  # ms to the first token without waking
    recs = simulate(System((engine(),), front_ms=0.0, wake=wake), reqs).records
    ttft = [(r.chunks[0] - r.sent) * 1000 for r in recs]
    # before the first request the engine idled "for ever": the curve's last point
    assert ttft[0] == pytest.approx(lone + 200.0)
    # request 1 waits for that step, then prefills beside request 0's first decode
    assert ttft[1] == pytest.approx(lone + 200.0 - 10.0 + (10 + 0.1 * 100 + 1.0))
    idle = recs[2].sent - max(r.chunks[-1] for r in recs[:2])
    assert 0.5 < idle < 1.0
    assert ttft[2] == pytest.approx(lone + float(np.interp(idle, (0.0, 0.1, 1.0),
                                                           (0.0, 20.0, 200.0))))
    assert gaps_ms(recs[2]) == pytest.approx([6.0] * 4)  # the steps after it: not slowed
    plain = simulate(System((engine(),), front_ms=0.0), reqs).records
    assert (plain[2].chunks[0] - plain[2].sent) * 1000 == pytest.approx(lone)


def test_the_wake_up_extra_has_a_share_of_the_step_so_a_longer_prompt_pays_more():
    # after 1 s idle: +20 ms, +50% of the step; half of both after 0.5 s
    wake = ((0.0, 0.0, 0.0), (1.0, 20.0, 0.5))
    for prompt in (100, 1000):
        step = 10 + 0.1 * prompt  # the prefill's step, engine()'s model
        reqs = [SimRequest(0.0, prompt, 2), SimRequest(5.0, prompt, 2)]
        first, later = simulate(System((engine(),), front_ms=0.0, wake=wake), reqs).records
        assert (first.chunks[0] - first.sent) * 1000 == pytest.approx(step + 20 + 0.5 * step)
        assert (later.chunks[0] - later.sent) * 1000 == pytest.approx(step + 20 + 0.5 * step)
    # between the curve's points both parts are interpolated
    first, mid = simulate(System((engine(),), front_ms=0.0, wake=wake),
                          [SimRequest(0.0, 1000, 2), SimRequest(0.6, 1000, 2)]).records
    idle = mid.sent - first.chunks[-1]
    assert 0.3 < idle < 0.6
    step = 10 + 0.1 * 1000
    assert (mid.chunks[0] - mid.sent) * 1000 == pytest.approx(step + 20 * idle + 0.5 * idle * step)


def test_a_decoder_idle_while_the_prompt_prefills_pays_the_curve_for_its_first_step():
    wake = ((0.0, 0.0, 0.0), (1.0, 100.0, 0.0))  # +0.1 ms per ms idle
    system = System(decode=(engine(),), prefill=(engine(),), link=LINK, kv_bytes=lambda t: 0,
                    front_ms=0.0, proxy_ms=0.0, wake=wake)
    first, second = simulate(system, [SimRequest(0.0, 100, 2), SimRequest(0.5, 100, 2)]).records
    prefill, decode_first = 10 + 0.1 * 100, 5 + 1.0  # the decoder's step: a decode's work
    # both engines idled for ever before the first request: +100 ms each
    assert (first.chunks[0] - first.sent) * 1000 == pytest.approx(
        prefill + 100 + decode_first + 100)
    # the second: the prefiller idled since the first prefill ended, the decoder since the
    # first request's last token (and while this prompt prefilled)
    pre_idle = 0.5 - (prefill + 100) / 1000
    pre_end = second.sent + (prefill + 100 * pre_idle) / 1000
    dec_idle = pre_end - first.chunks[-1]
    assert (second.chunks[0] - second.sent) * 1000 == pytest.approx(
        prefill + 100 * pre_idle + decode_first + 100 * dec_idle)


def test_contention_slows_a_step_by_its_share_per_busy_neighbour():
    # two replicas, one request each from the same moment: every step but the first of the
    # earlier one starts while the other steps; one alone never has a neighbour stepping
    both = [SimRequest(0.0, 10, 30), SimRequest(0.0, 10, 30)]
    for contention, shared in ((0.0, 1.0), (0.5, 1.5)):
        system = System((engine(), engine()), front_ms=0.0, contention=contention)
        for rec in simulate(system, both).records:
            assert np.median(gaps_ms(rec)) == pytest.approx(6.0 * shared)
        (alone,) = simulate(system, both[:1]).records
        assert gaps_ms(alone) == pytest.approx([6.0] * 29)
    # a prefiller's step starting stretches the decoder's run from its next step on, and
    # only while the prefiller steps
    reqs = [SimRequest(0.0, 10, 200), SimRequest(0.3, 5000, 1)]
    pd = System(decode=(engine(),), prefill=(engine(budget=512),), link=LINK,
                kv_bytes=lambda t: 0, front_ms=0.0, proxy_ms=0.0, contention=0.5)
    g = gaps_ms(simulate(pd, reqs).records[0])
    # alone; beside the prefiller; taking in its prompt's last token (two query rows)
    assert set(np.round(g, 6)) == {6.0, 9.0, 7.0}


def test_a_closed_loop_keeps_at_most_its_concurrency_in_flight_and_sends_on_each_end():
    # `vllm bench serve --max-concurrency 2` at an infinite rate: two at once, each next
    # one sent the moment one ends, P/D as collocated
    reqs = [SimRequest(0.0, 100, 5) for _ in range(6)]
    for system in (System((engine(),), front_ms=0.0),
                   System((engine(),), (engine(),), LINK, lambda n: n * 1000, front_ms=0.0,
                          proxy_ms=0.0)):
        recs = simulate(system, reqs, concurrency=2).records
        assert all(r.ok for r in recs)
        ends = sorted(r.end for r in recs)
        sends = sorted(r.sent for r in recs)
        assert sends[:2] == [recs[0].sent] * 2
        assert sends[2:] == pytest.approx(ends[:4])  # each later one at an earlier's end
        in_flight = [sum(r.sent <= t < r.end for r in recs) for t in sends]
        assert max(in_flight) == 2
    # a cap of one is one request after another
    one = simulate(System((engine(),), front_ms=0.0), reqs[:3], concurrency=1).records
    assert [r.sent for r in one[1:]] == pytest.approx([r.end for r in one[:2]])


def test_a_pulled_transfer_waits_for_the_decoders_next_step_and_joins_the_one_after():
    # as vLLM's NixlConnector pulls KV: the read starts with the decoder's next step after
    # the decode request reaches it, and the request joins at the first step boundary
    # after the read lands. Request A decodes alone; B's decode request reaches the
    # decoder 0.5 ms into one of A's steps, so its 200 ms read starts at that step's end
    system = System(decode=(engine(),), prefill=(engine(),), link=LINK,
                    kv_bytes=lambda t: 2e6 * t, front_ms=1.0, proxy_ms=3.0)
    a = SimRequest(0.0, 10, 120)
    (alone,) = simulate(system, [a]).records
    ends = alone.chunks  # the decoder's step ends while A runs alone
    boundary = next(c for c in ends if c - alone.sent > 0.3)
    reached = boundary + 0.0005  # B's decode request at the decoder
    # B's hop, prefill (10 + 0.1 x 100 ms) and the proxy's hop before it gets there
    arrival = reached - alone.sent - (1 + 3 + 20 + 3) / 1000
    recs = simulate(system, [a, SimRequest(arrival, 100, 3)]).records
    start = next(c for c in ends if c >= reached)  # the end of the step in progress
    joins = next(c for c in ends if c >= start + 0.2)
    assert recs[0].chunks[:ends.index(joins) + 1] == pytest.approx(ends[:ends.index(joins) + 1])
    # its first token ends the step it joins: A's next step end, now a batch of two
    assert recs[1].chunks[0] == pytest.approx(recs[0].chunks[ends.index(joins) + 1])
