"""A synthesized workload's shape: the longest request it would send."""

import pytest

from workloads.arrivals import Arrivals
from workloads.lengths import LengthDist
from workloads.presets import preset
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


def test_a_multi_turn_rate_counts_requests_so_conversations_start_at_it_over_their_turns():
    spec = SyntheticSpec(input=LengthDist("fixed", 4), output=LengthDist("fixed", 2),
                         arrivals=Arrivals("constant", 10.0), num_prompts=40, turns=4)
    starts = [c.start for c in synthesize(spec, 0).conversations]
    assert len(starts) == 10 and starts[1] - starts[0] == pytest.approx(0.4)
    single = synthesize(SyntheticSpec(arrivals=Arrivals("constant", 10.0), num_prompts=10), 0)
    assert [c.start for c in single.conversations][1] == pytest.approx(0.1)


def test_a_sized_preset_thinks_as_much_shorter_as_its_replies():
    def thinks(w):
        return sum(t.think_s for c in w.conversations for t in c.turns)

    full = preset("chat-multiturn", 1, num_prompts=50)
    short = preset("chat-multiturn", 1, num_prompts=50, output_scale=0.1)
    assert thinks(short) == pytest.approx(0.1 * thinks(full)) and thinks(full) > 0
