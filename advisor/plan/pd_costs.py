"""What a planned P/D placement is charged beside its two tiers' steps, each part with its
value and where it comes from, for the plan's manifest (`PlanFacts.pd_costs`)."""

from __future__ import annotations

from advisor.plan.system import System
from advisor.rundata.manifest import PdCost

PROXY_SOURCE = ("advisor's assumption per HTTP hop; measured here through advisor proxy "
                "before real vLLM's CPU build: +2.3 ms TTFT p50 over the hand path "
                "(benchmarks/proxy_overhead.py; docs/measurements.md)")


def pd_costs(system: System, mean_prompt: float, bytes_per_token: int) -> list[PdCost]:
    """The parts of P/D's cost `system` (a P/D's) is simulated with, for prompts of
    `mean_prompt` tokens whose KV is `bytes_per_token` a token."""
    link = system.link
    decoder = system.decode[0]
    moved = mean_prompt * bytes_per_token
    parts = [
        PdCost("proxy hops", f"{system.front_ms:g} ms to the proxy, {system.proxy_ms:g} ms "
               "to the prefiller (max_tokens=1), "
               f"{system.proxy_ms:g} ms from its answer to the decoder", PROXY_SOURCE),
        PdCost("prefill tier", "the prompt and one token, batched with its other prompts "
               f"under {system.prefill[0].max_batched_tokens} tokens a step",
               "vLLM's toy proxy and advisor proxy send the prefill request with "
               "max_tokens=1"),
        PdCost("KV pull", "starts with the decoder's next step after the decode request "
               "reaches it; the request joins the step after the read lands",
               "vLLM 0.32 NixlConnector: pull_worker.start_load_kv issues the read at a "
               "step, finished reads are collected each step"),
    ]
    if link is not None:
        parts.append(PdCost(
            "KV transfer", f"{link.name}: {link.gbps:g} GB/s reached, {link.latency_ms:g} ms "
            f"latency and {link.overhead_ms:g} ms per transfer; the mean prompt's "
            f"{moved / 1e6:.3g} MB in {link.seconds(moved) * 1000:.3g} ms; transfers into "
            "one decoder queue behind each other", link.source))
    parts.append(PdCost(
        "decoder KV capacity", f"{decoder.kv_tokens} tokens a decoder, "
        f"{decoder.kv_tokens / max(mean_prompt, 1):.0f} mean prompts; a transfer waits "
        "for blocks to free", "its GPUs' memory less the weights and activations "
        "(advisor.plan.candidates.kv_tokens)"))
    return parts
