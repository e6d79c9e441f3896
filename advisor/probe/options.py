"""`advisor probe`'s options, each with its flag; kept apart from the probes so that the
command line loads none of them to list them."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.flag_groups import EngineKind, engine_option, model_option
from advisor.flags import option
from advisor.measure.urls import DEFAULT_READY_TIMEOUT_S
from advisor.probe.wakeup import IDLE_S


@dataclass(frozen=True)
class ProbeOptions:
    """What `advisor probe` checks, and how."""

    as_json: bool = option(False, "print JSON", "--json")
    p2p_matrix: str | None = option(None, "a saved `nvidia-smi topo -p2p r` output (or topo "
                                          "-m, or both in one file) instead of the live one")
    link_mb: int = option(64, "payload size for the link measurements (MB)")
    transfer_check: str | None = option(None, "URL of a disaggregated deployment to check")
    # None: check the deployment at --transfer-check
    engine: EngineKind | None = engine_option(
        None, "transfer check: start a 1P1D of this engine here and check it instead of a "
              "URL: bundled (its shm connector) or vllm (NixlConnector)")
    metrics_urls: tuple[str, ...] = option((), "its decoders' /metrics (default URL/metrics)",
                                           "--metrics-url")
    check_prompts: int = option(3, "transfer check: prompts, sent one at a time")
    check_prompt_tokens: int = option(2048, "transfer check: tokens per prompt")
    model: str | None = model_option("transfer check: the served model (default: the first "
                                     "/v1/models lists; give it for a front without one; "
                                     "--engine: the model to start, default small, or mini on "
                                     "vllm)")
    ready_timeout: float = option(DEFAULT_READY_TIMEOUT_S, "seconds to wait for the deployment")
    # the link class the transfers are held to (advisor.measure.transfer.LINK_FLOORS_GBPS)
    link: str = option("fast", "transfer check: fast (InfiniBand/NVLink-class, > 1 GB/s) or "
                               "tcp (> 100 MB/s)", "--link-class")
    wakeup_idle_s: float = option(IDLE_S, "seconds idle before each pass of the wake-up check "
                                          "(0: skip it)")
