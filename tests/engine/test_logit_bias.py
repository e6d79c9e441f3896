"""OpenAI's logit_bias moves the engine's choices as asked, for one request of a batch only."""

from engine.core.sequence import SamplingParams
from engine.llm import LLM

GREEDY = {"max_tokens": 12, "temperature": 0, "ignore_eos": True}


def test_logit_bias_forces_and_forbids_tokens_per_request():
    llm = LLM("tiny")
    prompts = [[11, 12, 13, 14], [21, 22, 23]]
    plain = [o.token_ids for o in llm.generate(prompts, SamplingParams(**GREEDY))]
    forced = SamplingParams(**GREEDY, logit_bias=((77, 100.0),))
    out = llm.generate(prompts, [forced, SamplingParams(**GREEDY)])
    assert out[0].token_ids == [77] * 12
    assert out[1].token_ids == plain[1]  # its neighbour in the batch is untouched
    banned = sorted(set(plain[0]))
    out = llm.generate(
        prompts[:1], SamplingParams(**GREEDY, logit_bias=tuple((t, -100.0) for t in banned))
    )
    assert not set(out[0].token_ids) & set(banned)
