"""Sizing the sweep from the calibration, so that the experiment sits where the guide's
effect lives on whatever hardware runs it: prompts whose prefill stalls running decodes
past the ITL SLO, outputs long enough for decodes to be stalled, a first rate where
collocated should start to miss, all fitting the default sweep's five minutes; and a
default SLO this machine cannot meet widened. docs/design/sweep.md gives the rules."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from scipy.special import gammaincinv

from advisor.rundata.evidence import Calibration
from advisor.rundata.manifest import Sizing
from advisor.rundata.slo import Slo
from advisor.sweep.calibrate import BATCH
from workloads.presets import PRESETS

REGIME = {  # the preset's mean prompt's prefill, in ITL SLOs
    "long-prompt": 2.5,  # the guide's case: prefills stall decodes
    "chat-agent": 2.5,  # long chat prompts, and a heavy front end
    "chat-multiturn": 2.0,  # growing context: later turns stall more
    "agent-loop": 2.0,
    "bursty-low": 2.0,  # low traffic: few prefills to stall anything
    "short-chat": 0.5,  # short prompts: prefills hide between decode steps
}
TTFT_SHARE = 0.25
# the least a long prompt's prefill may be cut to, in ITL SLOs, for its first pass to fit:
# a stall still past the SLO
STALL_MIN = 1.25
SHORTEN = 0.95  # the target prefill's step down while the first pass does not fit
DECODE_PREFILL = 2.5
ITL_HEADROOM = 1.5
# a quarter over the calibrated tail: at the tail itself an unloaded decoder meets the
# SLO for 9 requests in 10, the attainment target, and nothing more
TAIL_HEADROOM = 1.25
MIN_PROMPT, MIN_OUTPUT = 32, 12
# seconds of rate runs the first pass may take, of the default sweep's 5 minutes: the
# calibration, two starts, the drains and the report take ~80 s more on a slow CPU, and a
# second pass (where the intervals overlap) needs the rest
FIRST_PASS_S = 160.0
# the rates a first pass usually measures, as multiples of the first: the leader doubles to
# its first sure miss (1, 2, 4), the follower replays from there (2, 4) and doubles once (8)
FIRST_PASS = (1, 2, 4, 2, 4, 8)


def size(workload: str, slo: Slo, cal: Calibration, context: int,
         scale: float | None = None, output_scale: float | None = None,
         widen_slo: bool = False, instances: int = 1, attainment: float = 0.9,
         run_s: Callable[[float], float] | None = None, searched: bool = True) -> Sizing:
    """The lengths (unless given; a given `scale` alone scales outputs too), the SLO
    (widened only if `widen_slo`) and the first rate for `workload`, whose collocated
    placement has `instances` engines and must meet the SLO for `attainment` of requests;
    with `run_s` (the seconds a run at a rate lasts), a first rate whose first pass fits
    FIRST_PASS_S. The notes name the first rate only where a rate search starts there
    (`searched`: not where --rates or --start-rate decide the rates)."""
    spec = PRESETS[workload][1]
    mean_in, mean_out = spec.input.mean, spec.output.mean
    notes: list[str] = []
    if scale is not None and output_scale is None:  # a given scale shrinks outputs alike
        output_scale = scale
    step, tail = cal.step_at(BATCH), cal.tail_at(BATCH) or 0.0
    by_step, by_tail = ITL_HEADROOM * step, TAIL_HEADROOM * tail
    if widen_slo and max(by_step, by_tail) > slo.gap_ms:
        itl = math.ceil(max(by_step, by_tail) / 10) * 10
        why = (f"{ITL_HEADROOM:g}x the unloaded decode step at {BATCH} running requests "
               f"({step:.0f} ms here)") if by_step >= by_tail else (
            f"{TAIL_HEADROOM:g}x the unloaded tail: at {BATCH} running requests, 1 in 10 "
            f"requests had a p99 ITL over {tail:.0f} ms here against a median step of "
            f"{step:.0f} ms: this host's own jitter")
        notes.append(f"ITL SLO widened from {slo.gap_ms:g} to {itl} ms: {why}")
        slo = slo.with_limit(slo.gap_metric, itl)
    if widen_slo and cal.ttft_at(MIN_PROMPT) > TTFT_SHARE * slo.ttft_ms:
        ttft = math.ceil(cal.ttft_at(MIN_PROMPT) / TTFT_SHARE / 100) * 100
        notes.append(f"TTFT SLO widened from {slo.ttft_ms:g} to {ttft} ms: a {MIN_PROMPT}-token "
                     f"prompt alone takes {cal.ttft_at(MIN_PROMPT):.0f} ms here")
        slo = slo.with_limit("ttft", ttft)
    regime = REGIME[workload] * slo.gap_ms
    target = min(regime, TTFT_SHARE * slo.ttft_ms)
    lengths = _Lengths(cal, mean_in, mean_out, context, scale, output_scale)
    prompt, output = lengths.at(target)
    shorter = ""
    if scale is None and output_scale is None and run_s is not None:
        # shorter requests before a higher first rate: from above the knee collocated
        # misses at its first rate, and its interval has no lower bound
        floor, cut = min(STALL_MIN * slo.gap_ms, regime), target
        took = need = first_pass_s(lengths.knee(output, instances, attainment), run_s)
        while need > FIRST_PASS_S and cut * SHORTEN >= floor:
            cut *= SHORTEN
            prompt, output = lengths.at(cut)
            need = first_pass_s(lengths.knee(output, instances, attainment), run_s)
        shorter = (f"; shorter than {target:.0f} ms, whose first pass from collocated's knee "
                   f"would take ~{took:.0f} s of rate runs, so that one fits {FIRST_PASS_S:g} s"
                   if cut < target else "")
    if scale is None:
        scale = prompt / mean_in
        notes.append(f"prompts ~{prompt} tokens (scale {scale:.3g}): a prefill of "
                     f"{cal.ttft_at(prompt):.0f} ms, {cal.ttft_at(prompt) / slo.gap_ms:.1f}x the "
                     f"ITL SLO and {cal.ttft_at(prompt) / slo.ttft_ms:.0%} of the TTFT SLO"
                     + shorter)
    if output_scale is None:
        output_scale = output / mean_out
        notes.append(f"outputs ~{output} tokens (output scale {output_scale:.3g}): decoding one "
                     f"lasts {output * cal.step_at(1) / cal.ttft_at(prompt):.1f}x its prefill")
    decode_s = output * cal.step_at(1) / 1000
    start = float(f"{lengths.knee(output, instances, attainment):.2g}")
    knee = (f"where a collocated instance's requests (decoding ~{decode_s:.2f} s) start to "
            "meet other prefills")
    if run_s is not None and first_pass_s(start, run_s) > FIRST_PASS_S:
        fits = float(f"{fitting_start(start, run_s):.2g}")
        note = (f"rate search from {fits:g} req/s, above {start:g} {knee}: a first pass "
                f"from {start:g} would take ~{first_pass_s(start, run_s):.0f} s of rate runs, "
                f"from {fits:g} ~{first_pass_s(fits, run_s):.0f} s")
        start = fits
    else:
        note = f"rate search from {start:g} req/s: {knee}"
    if searched:
        notes.append(note)
    return Sizing(scale, output_scale, prompt, output, slo, start, tuple(notes))


@dataclass(frozen=True)
class _Lengths:
    """Prompt and output tokens for a target prefill (ms), where they are not given."""

    cal: Calibration
    mean_in: float
    mean_out: float
    context: int
    scale: float | None
    output_scale: float | None

    def at(self, prefill_ms: float) -> tuple[int, int]:
        """(prompt, output) tokens: a prompt whose prefill lasts `prefill_ms`, an output
        decoding for DECODE_PREFILL prefills (each as given, where it was)."""
        cal, half = self.cal, self.context // 2
        if self.scale is None:
            tokens = (prefill_ms - cal.prefill_base_ms) / cal.prefill_ms_per_token
            prompt = int(min(max(tokens, MIN_PROMPT), self.mean_in, half))
        else:
            prompt = max(1, round(self.mean_in * self.scale))
        if self.output_scale is None:
            steps = DECODE_PREFILL * cal.ttft_at(prompt) / cal.step_at(1)
            return prompt, int(min(max(steps, MIN_OUTPUT), self.mean_out, half))
        return prompt, max(1, round(self.mean_out * self.output_scale))

    def knee(self, output: int, instances: int, attainment: float) -> float:
        """`start_rate` for requests of `output` tokens."""
        return start_rate(output * self.cal.step_at(1) / 1000, instances, attainment)


def first_pass_s(start: float, run_s: Callable[[float], float]) -> float:
    """Seconds of rate runs in a first pass from `start` (FIRST_PASS)."""
    return sum(run_s(m * start) for m in FIRST_PASS)


def fitting_start(start: float, run_s: Callable[[float], float]) -> float:
    """The lowest rate from `start` up, in 5% steps, whose first pass fits FIRST_PASS_S (or
    the rate where runs no longer get shorter as it grows)."""
    rate = start
    while first_pass_s(rate, run_s) > FIRST_PASS_S and first_pass_s(
            rate * 1.05, run_s) < first_pass_s(rate, run_s):
        rate *= 1.05
    return rate


def start_rate(decode_s: float, instances: int, attainment: float) -> float:
    """The rate (req/s) at which (1 - attainment) / 2 of a collocated instance's requests
    see the instance's next request arrive while they decode (`decode_s`), with arrivals
    Poisson and dealt round robin over `instances` replicas."""
    # P(gamma(instances, rate) < decode_s) = share <=> rate x decode_s is the share-quantile
    # of gamma(instances, 1): the inverse regularized incomplete gamma
    share = (1 - min(attainment, 0.99)) / 2
    return float(gammaincinv(instances, share)) / decode_s
