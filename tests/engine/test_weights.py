"""Weights: seeded dummies are deterministic; HF safetensors load into the fused layout."""

import json

import pytest
from safetensors.torch import save_file

from engine import SamplingParams
from engine.core.config import PRESETS, load_model_config
from engine.hf_dir import hf_config
from engine.model.weights import hf_state_dict
from tests.engine.helpers import make_llm, random_prompts

PARAMS = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def save_hf_dir(path, llm, drop=()):
    cfg = llm.config
    sd = {
        k: v.contiguous()
        for k, v in hf_state_dict(llm.engine.runner.model).items()
        if k not in drop
    }
    save_file(sd, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(hf_config(cfg, "float32")))


def test_same_seed_same_weights_other_seed_other_output():
    prompts = random_prompts(2, (5, 20))
    a = make_llm(seed=0).generate(prompts, PARAMS)
    b = make_llm(seed=0).generate(prompts, PARAMS)
    c = make_llm(seed=1).generate(prompts, PARAMS)
    assert [o.token_ids for o in a] == [o.token_ids for o in b] != [o.token_ids for o in c]


def test_safetensors_directory_loads_to_the_same_model(tmp_path):
    source = make_llm(seed=3)
    save_hf_dir(tmp_path, source)
    loaded = make_llm(model=str(tmp_path), seed=0)  # seed ignored: weights come from disk
    prompts = random_prompts(3, (5, 40))
    assert [o.token_ids for o in loaded.generate(prompts, PARAMS)] == [
        o.token_ids for o in source.generate(prompts, PARAMS)
    ]


def test_checkpoint_missing_a_tensor_is_named(tmp_path):
    save_hf_dir(tmp_path, make_llm(), drop={"model.layers.1.self_attn.k_proj.weight"})
    with pytest.raises(ValueError, match=r"layers\.1\.self_attn\.qkv_proj\.weight"):
        make_llm(model=str(tmp_path))


def test_presets_have_the_guides_kv_sizes():
    assert PRESETS["llama-3.1-70b"].kv_bytes_per_token() == 327680
    assert PRESETS["qwen2.5-7b"].kv_bytes_per_token() == 57344


def test_unsupported_architectures_are_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"]}))
    with pytest.raises(ValueError, match="not supported yet"):
        load_model_config(str(tmp_path))
