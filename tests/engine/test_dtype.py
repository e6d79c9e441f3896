"""dtype "auto": the faster of float32 and bfloat16 on this CPU, by measurement; an explicit
dtype is honoured; every instance of a topology runs the same."""

import json
import os
import subprocess
import sys

import pytest
import torch

from engine.llm import LLM
from engine.model import dtype
from engine.processes.launch import Topology

ZEN3 = {"float32": 62.0, "bfloat16": 1.0}  # AVX2 only: bf16 emulated (measured, Zen 3)
ZEN4 = {"float32": 80.0, "bfloat16": 160.0}  # AVX-512-BF16


@pytest.mark.parametrize("rates,picked", [(ZEN3, "float32"), (ZEN4, "bfloat16")])
def test_auto_picks_the_faster_dtype_by_its_measured_rate(rates, picked):
    choice = dtype.choose_cpu(rates.__getitem__)
    assert choice.dtype == picked and choice.gflops == rates
    assert f"{rates['bfloat16']:.0f} vs {rates['float32']:.0f} GFLOP/s" in choice.reason


def test_a_slow_spell_in_one_measurement_does_not_turn_the_choice():
    # bfloat16's first window lands in a burst of host slowness (4x), its later ones do not
    seen = {"float32": [80.0, 82.0, 79.0], "bfloat16": [40.0, 160.0, 158.0]}
    choice = dtype.choose_cpu(lambda d: seen[d].pop(0))
    assert choice.dtype == "bfloat16" and choice.gflops == {"float32": 82.0, "bfloat16": 160.0}
    assert not any(seen.values())  # every round measured both


def test_an_explicit_dtype_is_honoured():
    assert dtype.resolve("float16").dtype == "float16"
    assert dtype.resolve("bfloat16").reason == "asked for"


@pytest.fixture
def cpu_without_bf16(monkeypatch):
    monkeypatch.setattr(dtype, "_cpu_choice", lambda: dtype.choose_cpu(ZEN3.__getitem__))


def test_llm_small_runs_in_float32_on_a_cpu_without_native_bf16(cpu_without_bf16):
    llm = LLM(model="small", num_kv_blocks=8)
    assert llm.engine.config.dtype == "float32" and llm.engine.runner.dtype is torch.float32
    assert llm.engine.runner.layout.dtype == "float32"


def test_the_real_measurement_is_quick_and_positive():
    rate = dtype.matmul_gflops("float32", seconds=0.01)
    assert rate > 0.1


def test_a_topology_refuses_an_unknown_dtype():
    with pytest.raises(ValueError, match="dtype must be one of auto, float32"):
        Topology(dtype="fp8").validate()


# NOTE: these variables hold oneDNN, MKL and torch's own kernels to AVX2 on an x86 CPU
# that has more: how an AVX2-only CPU (Zen 3) runs, on whichever machine runs the test
AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "ATEN_CPU_CAPABILITY": "avx2"}
_EXPLICIT_BF16 = """
import json, torch
from engine import SamplingParams
from engine.llm import LLM
llm = LLM(model="tiny", dtype="bfloat16")
out = llm.generate([[5, 6, 7, 8]], SamplingParams(max_tokens=6, temperature=0.0))[0]
print(json.dumps({"onednn_bf16": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                  "tokens": out.token_ids,
                  "dtype": str(llm.engine.runner.dtype),
                  "packed": [lin.packed is not None for layer in llm.engine.runner.model.layers
                             for lin in (layer.self_attn.qkv_proj, layer.mlp.down_proj)]}))
"""


@pytest.mark.integration
def test_an_explicit_bfloat16_runs_on_a_cpu_whose_onednn_has_no_bf16_kernels():
    """`--dtype bfloat16` is honoured on an AVX2-only CPU: its weights keep torch's kernel
    (packing them for oneDNN raised there, and no model loaded)."""
    run = subprocess.run([sys.executable, "-c", _EXPLICIT_BF16], capture_output=True, text=True,
                         env={**os.environ, **AVX2_ONLY}, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    r = json.loads(run.stdout.strip().splitlines()[-1])
    if r["onednn_bf16"]:
        pytest.skip("this CPU's oneDNN was not held to AVX2 (not x86?)")
    assert r["dtype"] == "torch.bfloat16" and len(r["tokens"]) == 6
    assert not any(r["packed"])
