"""How much slower a placement's runs decoded than the calibration before them, from the
records alone: the median inter-token gap over the calibrated step at the batch it ran."""

import pytest

from advisor.goodput.from_runs import decode_slowdown
from advisor.rundata.evidence import Calibration

# steps of 10 ms alone and 24 ms at 8 running requests: 12 ms at 2
CAL = Calibration([16, 1024], [20.0, 300.0], [1, 8], [10.0, 24.0], 0.28, 15.0)


def _record(first: float, gaps_ms: list[float], **extra) -> dict:
    chunks, t = [first], first
    for g in gaps_ms:
        t += g / 1000
        chunks.append(t)
    return {"ok": True, "warmup": False, "chunks": chunks, **extra}


def test_gaps_are_held_to_the_step_at_the_batch_each_decoder_ran():
    # two requests decoding side by side on one engine for the whole run: batch 2
    both = [_record(0.0, [30.0] * 20), _record(0.0, [30.0] * 20)]
    assert decode_slowdown(both, CAL, decoders=1) == pytest.approx(30 / 12)
    # the same requests spread over two engines: one each, against the step alone
    assert decode_slowdown(both, CAL, decoders=2) == pytest.approx(30 / 10)
    # one after the other on one engine: batch 1
    apart = [_record(0.0, [10.0] * 20), _record(0.2, [10.0] * 20)]
    assert decode_slowdown(apart, CAL, decoders=1) == pytest.approx(1.0)


def test_a_batch_of_two_is_held_to_its_own_calibrated_step():
    """Measured so on the Zen 3 (float32): a step of 2 requests took ~2x one of 1, of 8
    ~2.4x. Calibrated at 1 and 8 only, a P/D decoder's pairs read as 1.7x slower than
    calibrated (the line puts 2 at 12 ms); with the batch-2 point, as fast as calibrated."""
    both = [_record(0.0, [20.0] * 20), _record(0.0, [20.0] * 20)]
    assert decode_slowdown(both, CAL, decoders=1) == pytest.approx(20 / 12)
    three = Calibration([16, 1024], [20.0, 300.0], [1, 2, 8], [10.0, 20.0, 24.0], 0.28, 15.0)
    assert decode_slowdown(both, three, decoders=1) == pytest.approx(1.0)


def test_each_gap_is_held_to_the_step_at_the_batch_running_when_it_came():
    # one request alone (10 ms steps), then three together (14 ms steps at batch 3): every
    # gap is the calibrated step at its batch. Against the run's mean batch (1.53: a step
    # of 11.1 ms) the median gap (14 ms: three requests' gaps per step) said 1.27
    alone = _record(0.0, [10.0] * 50)
    together = [_record(1.0, [14.0] * 50) for _ in range(3)]
    assert decode_slowdown([alone, *together], CAL, decoders=1) == pytest.approx(1.0)
    slower = [alone, *(_record(1.0, [21.0] * 50) for _ in range(3))]
    assert decode_slowdown(slower, CAL, decoders=1) == pytest.approx(1.5)


def test_warm_up_failed_and_single_chunk_requests_are_left_out():
    kept = _record(0.0, [20.0] * 10)
    noise = [_record(0.0, [500.0] * 10, warmup=True), _record(0.0, [500.0] * 10, ok=False),
             _record(0.0, [])]
    assert decode_slowdown([kept, *noise], CAL, decoders=1) == pytest.approx(2.0)
    assert decode_slowdown(noise, CAL, decoders=1) is None
