"""Bad requests raise ValueError naming the problem; the engine keeps serving."""

import pytest

from engine import SamplingParams
from tests.engine.helpers import assert_no_leaks, make_llm

OK = SamplingParams(max_tokens=4, temperature=0.0)


@pytest.mark.parametrize("prompt,params,message", [
    ([], OK, "prompt is empty"),
    ([1, 512], OK, "outside the vocabulary"),
    ([-1], OK, "outside the vocabulary"),
    ([1] * 2000, SamplingParams(max_tokens=100), "exceeds the model's context"),
    ([1, 2], SamplingParams(max_tokens=0), "max_tokens"),
    ([1, 2], SamplingParams(temperature=-1.0), "temperature"),
    ([1, 2], SamplingParams(top_p=0.0), "top_p"),
])
def test_bad_request_raises_and_engine_keeps_serving(prompt, params, message):
    llm = make_llm()
    good = llm.generate([[5, 6, 7]], OK)[0].token_ids
    with pytest.raises(ValueError, match=message):
        llm.generate([[5, 6, 7], prompt], params)
    assert llm.generate([[5, 6, 7]], OK)[0].token_ids == good
    assert_no_leaks(llm)


def test_request_too_big_for_the_pool_or_budget_is_refused():
    with pytest.raises(ValueError, match="KV blocks"):
        make_llm(block_size=4, num_kv_blocks=4).generate([[1] * 10], SamplingParams(max_tokens=10))
    with pytest.raises(ValueError, match="chunked prefill off"):
        make_llm(max_num_batched_tokens=8, enable_chunked_prefill=False).generate(
            [[1] * 10], OK)


def test_bad_engine_options_are_named():
    with pytest.raises(ValueError, match="unknown model"):
        make_llm(model="no-such-model")
    with pytest.raises(ValueError, match="role"):
        make_llm(role="sideways")
    with pytest.raises(TypeError, match="bogus"):
        make_llm(bogus=1)


def test_cuda_device_without_cuda_is_a_clear_error(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        make_llm(device="cuda:0")


def test_max_model_len_caps_the_context_and_cannot_pass_the_models():
    llm = make_llm(max_model_len=64)
    with pytest.raises(ValueError, match="exceeds the model's context of 64 tokens"):
        llm.generate([[1] * 60], SamplingParams(max_tokens=8))
    assert len(llm.generate([[1] * 56], SamplingParams(max_tokens=8, ignore_eos=True))[0]
               .token_ids) == 8
    with pytest.raises(ValueError, match="max_model_len 4096 exceeds the model's context"):
        make_llm(max_model_len=4096)  # tiny's own is 2048
