"""The P2P matrix decides: recorded `nvidia-smi topo -p2p r` and `topo -m` outputs (2, 4 and
8 GPUs; OK, NS, CNS, NV#, PIX, PXB, SYS) parsed, each prefiller-decoder pair placed on GPUs
with P2P where the matrix has one, and the transfer row naming a pair without it with the
predicted host-staged transfer."""

from pathlib import Path

import pytest

from advisor.decide.table import recommend
from advisor.errors import UsageError
from advisor.goodput.p2p_evidence import p2p_evidence
from advisor.probe import p2p
from advisor.probe.kvsize import kv_size
from advisor.probe.links import HOST_STAGED
from advisor.probe.p2p_pairs import evidence, place, summary
from advisor.rundata.evidence import (
    Evidence,
    KVTransferEvidence,
    PlacementEvidence,
    WorkloadEvidence,
)
from advisor.rundata.manifest import ProbeFindings
from advisor.rundata.slo import Slo
from advisor.sweep.options import SweepOptions

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures"


def matrix(name: str) -> p2p.P2PMatrix:
    return p2p.parse((FIX / name).read_text())


def test_topo_m_alone_gives_paths_and_says_p2p_is_unknown_off_nvlink():
    m = matrix("topo_m_2gpu_pix.txt")
    assert m.paths == [["X", "PIX"], ["PIX", "X"]]
    assert m.status == [["X", "U"], ["U", "X"]] and m.label(0, 1) == "U over PIX"
    nv = matrix("topo_m_4gpu_nvlink_sys.txt")  # ANSI codes around a header with more columns
    assert nv.ok_pairs() == [(0, 1), (2, 3)] and nv.label(0, 2) == "U over SYS"
    assert nv.to_json()["legend"]["NV12"] == "a bonded set of 12 NVLinks"


def test_both_outputs_in_one_file_give_status_and_paths():
    m = matrix("p2p_and_topo_8gpu.txt")
    assert len(m.gpus) == 8 and m.label(0, 1) == "OK over PXB" and m.label(3, 4) == "NS over SYS"
    assert len(m.ok_pairs()) == 12 and not m.all_ok


def test_matrices_naming_different_gpus_are_refused():
    two = (FIX / "p2p_2gpu_ansi.txt").read_text()
    with pytest.raises(UsageError, match="different GPUs"):
        p2p.parse(two + (FIX / "topo_m_4gpu_nvlink_sys.txt").read_text())


def test_a_missing_file_names_the_flag():
    with pytest.raises(UsageError, match="--p2p-matrix /nonexistent"):
        p2p.read("/nonexistent")


def test_1p1d_goes_on_the_pair_with_p2p_not_the_first_two_gpus():
    """GPU0-GPU1 lack P2P, GPU0-GPU2 have it: 1P1D on 0 and 2."""
    placed = place(matrix("p2p_4gpu_pairs.txt"), [0, 1, 2, 3], 1, 1)
    assert (placed.prefill, placed.decode) == ([[0]], [[2]])
    assert [(p.prefill_gpu, p.decode_gpu, p.status) for p in placed.pairs] == [(0, 2, "OK")]
    assert placed.how == "every P->D pair on GPUs with P2P"


def test_xpyd_and_tensor_parallel_placements_take_the_most_p2p_pairs():
    m = matrix("p2p_and_topo_8gpu.txt")  # two switches of four: P2P within one only
    two = place(m, list(range(8)), 1, 1, tp=2)
    assert (two.prefill, two.decode) == ([[0, 1]], [[2, 3]])
    assert all(p.status == "OK over PXB" for p in two.pairs)
    # every prefiller sends to every decoder: 4P4D can have at most 8 of its 16 pairs on P2P
    wide = place(m, list(range(8)), 4, 4)
    assert sum(p.status.startswith("OK") for p in wide.pairs) == 8
    assert wide.how.startswith("8 of 16 P->D GPU pairs with P2P")
    assert place(m, [3, 4, 5], 1, 1).gpus == [4, 5]  # only the GPUs given
    nv = place(matrix("topo_m_4gpu_nvlink_sys.txt"), [0, 1, 2, 3], 1, 1)
    assert nv.gpus == [0, 1] and nv.pairs[0].status == "OK over NV12"


def test_no_matrix_places_in_order_and_bad_gpus_are_errors():
    assert place(None, [5, 6, 7], 1, 2).gpus == [5, 6, 7]
    with pytest.raises(ValueError, match="needs 4 GPUs"):
        place(None, [0, 1, 2], 1, 1, tp=2)
    with pytest.raises(ValueError, match="GPU 9 is not in the P2P matrix"):
        place(matrix("p2p_4gpu_pairs.txt"), [0, 9], 1, 1)


def _evidence(p2p_ev, kv_ms: float | None) -> Evidence:
    kv = KVTransferEvidence(mean_ms=kv_ms) if kv_ms is not None else None
    return Evidence(Slo.of(2000, 50), PlacementEvidence("collocated-2"),
                    WorkloadEvidence(mean_prompt_tokens=8192, concurrency=1.5),
                    kv_transfer=kv, p2p=p2p_ev)


def test_with_no_p2p_anywhere_the_row_names_the_pair_and_the_predicted_transfer():
    m = matrix("p2p_2gpu_ansi.txt")  # CNS both ways
    placed = place(m, [0, 1], 1, 1)
    assert placed.how == "no GPU pair here has P2P: KV stages through the host"
    ev = evidence(m, "topo.txt", placed, "qwen2.5-7b", 8192)
    nbytes = kv_size("qwen2.5-7b", 8192).total_bytes  # the guide's ~470 MB
    assert ev.kv_mb == pytest.approx(nbytes / 1e6) and 450 < ev.kv_mb < 480
    assert ev.host_staged_ms == pytest.approx(HOST_STAGED.seconds(nbytes) * 1000)
    rec = recommend(_evidence(ev, None))
    (row,) = [r for r in rec.rows if r.id == "kv_transfer_slow"]
    assert row.fired and row.evidence["kv_transfer_mean_ms"] is None
    assert row.evidence["p2p_used"] == "GPU0->GPU1 CNS" and row.evidence["p2p_pairs"] == "none"
    assert row.evidence["predicted_host_staged_ms"] == ev.host_staged_ms
    said = " ".join(rec.reasons)
    assert "GPU0->GPU1 (CNS: chipset not supported) lack P2P" in said
    assert f"{ev.kv_mb:.0f} MB" in said and f"{HOST_STAGED.gbps:.2f} GB/s" in said
    assert "predicted, not measured" in said and "GPU pairs with P2P: none" in said


def test_a_measured_transfer_outranks_the_matrix_either_way():
    m = matrix("p2p_4gpu_pairs.txt")
    lacking = evidence(m, "topo.txt", place(m, [0, 1], 1, 1), "qwen2.5-7b", 8192)
    assert lacking.used[0].status == "NS"
    healthy = recommend(_evidence(lacking, 12.0))
    (row,) = [r for r in healthy.rows if r.id == "kv_transfer_slow"]
    assert not row.fired
    assert any("measured healthy (12 ms per transfer)" in r for r in healthy.reasons)
    slow = recommend(_evidence(lacking, 1300.0))
    said = " ".join(slow.reasons)
    assert "it explains the slow transfer" in said
    assert "GPU pairs with P2P: GPU0-GPU2, GPU1-GPU3" in said
    fine = evidence(m, "topo.txt", place(m, [0, 1, 2, 3], 1, 1), "qwen2.5-7b", 8192)
    assert fine.kv_mb is None  # nothing to predict: the pair has P2P
    assert not any("P2P matrix" in r for r in recommend(_evidence(fine, 12.0)).reasons)


def test_a_deployment_whose_gpus_are_unknown_is_judged_by_the_whole_matrix():
    none = evidence(matrix("p2p_2gpu_ansi.txt"), "nvidia-smi topo -p2p r", None,
                    "qwen2.5-7b", 8192)
    assert none.used == [] and none.placed.startswith("unknown") and none.kv_mb
    said = " ".join(recommend(_evidence(none, None)).reasons)
    assert "no GPU pair in it has P2P" in said
    some = evidence(matrix("p2p_4gpu_pairs.txt"), "x", None, "qwen2.5-7b", 8192)
    assert some.kv_mb is None and some.p2p_pairs == [[0, 2], [1, 3]]
    assert not any("P2P matrix" in r for r in recommend(_evidence(some, None)).reasons)


def test_a_sweep_puts_its_cuda_pd_on_p2p_pairs_and_its_evidence_says_which():
    m = matrix("p2p_4gpu_pairs.txt")
    opts = SweepOptions(model="tiny", device="cuda", topologies="collocated:2,disagg:1p1d")
    placed = opts.engine_to_start("float32").placements(opts.topology_specs, m)
    (col,) = [p for p in placed if p.kind == "collocated"]
    (dis,) = [p for p in placed if p.kind == "disagg"]
    assert col.topology.gpus is None and dis.topology.gpus == (0, 2)
    env: dict = {}
    assert dis.topology.instance_device(1, env) == "cuda:0" and env["CUDA_VISIBLE_DEVICES"] == "2"
    probe = ProbeFindings(p2p=m.record(), p2p_source="topo.txt")
    ev = p2p_evidence(placed, probe, "tiny", 500, "float32")
    assert [(p.prefill_gpu, p.decode_gpu, p.status) for p in ev.used] == [(0, 2, "OK")]
    assert ev.source == "topo.txt" and ev.placed == "every P->D pair on GPUs with P2P"
    url = SweepOptions(disagg_url="http://127.0.0.1:9", collocated_url="http://127.0.0.1:8")
    by_url = p2p_evidence(url.engine_to_start("auto").placements((), m), probe, None, 500,
                          "auto")
    assert by_url.used == [] and by_url.placed.startswith("unknown")
    assert summary(ev) == "GPU0->GPU2 OK (topo.txt)"  # kv_transfer.p2p says it in a line
    assert summary(by_url) == "pairs used unknown; with P2P here: GPU0-GPU2, GPU1-GPU3 (topo.txt)"
    assert p2p_evidence(placed, ProbeFindings(), "tiny", 500, "float32") is None


def test_per_role_tp_pairs_ranks_that_hold_the_same_kv_heads():
    """A TP-2 prefiller and two TP-1 decoders: each decoder's one rank holds both prefill
    ranks' heads, so it pairs with both."""
    placed = place(None, [0, 1, 2, 3], 1, 2, 2, 1)
    assert placed.prefill == [[0, 1]] and placed.decode == [[2], [3]]
    assert [(p.prefill_gpu, p.decode_gpu) for p in placed.pairs] == [(0, 2), (1, 2), (0, 3),
                                                                     (1, 3)]
    wide = place(None, [0, 1, 2, 3], 2, 1, 1, 2)  # two TP-1 prefillers into a TP-2 decoder
    assert [(p.prefill_gpu, p.decode_gpu) for p in wide.pairs] == [(0, 2), (0, 3), (1, 2),
                                                                   (1, 3)]
