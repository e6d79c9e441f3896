"""A synthesized workload's shape: the longest request it would send."""

from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.spec import Conversation, SyntheticSpec, Turn, Workload, synthesize


def test_the_longest_request_carries_every_earlier_turn_and_reply():
    convs = [Conversation("a", 0.0, [Turn([1] * 10, 5), Turn([1] * 3, 4)]),  # 10+5+3+4
             Conversation("b", 0.1, [Turn([1] * 20, 1)])]
    assert Workload("w", convs).longest() == 22
    assert Workload("none", []).longest() == 0


def test_the_longest_request_of_a_single_turn_workload_is_its_longest_prompt_and_output():
    spec_in, spec_out = LengthDist("uniform", 100, 0.5), LengthDist("fixed", 7)
    w = synthesize(SyntheticSpec(input=spec_in, output=spec_out, arrivals=Arrivals("poisson", 1),
                                 num_prompts=50), seed=3)
    prompts = [len(c.turns[0].new_tokens) for c in w.conversations]
    assert w.longest() == max(prompts) + 7 and 100 < max(prompts) <= 150
