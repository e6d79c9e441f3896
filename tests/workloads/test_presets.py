"""Presets with a shared prefix: one system prompt ahead of unique prompts."""

import numpy as np
import pytest

from workloads.presets import preset, preset_spec

pytestmark = pytest.mark.unit


def test_a_shared_prefix_is_the_same_leading_tokens_in_every_prompt_of_the_same_mean_length():
    plain = preset("long-prompt", 3, num_prompts=40, rate=1.0)
    shared = preset("long-prompt", 3, num_prompts=40, rate=1.0, shared_prefix=0.25)
    prompts = [c.turns[0].new_tokens for c in shared.conversations]
    n = round(preset_spec("long-prompt").input.mean * 0.25)
    assert len({tuple(p[:n]) for p in prompts}) == 1  # one prefix
    assert len({tuple(p[n:n + 8]) for p in prompts}) == len(prompts)  # then unique
    mean = np.mean([len(c.turns[0].new_tokens) for c in plain.conversations])
    assert np.mean([len(p) for p in prompts]) == pytest.approx(mean, rel=0.1)


@pytest.mark.parametrize("name,share,needle", [
    ("long-prompt", 1.0, "0 to under 1"), ("chat-agent", 0.5, "token-ID presets")])
def test_a_shared_prefix_outside_its_range_or_on_chat_presets_is_refused(name, share, needle):
    with pytest.raises(ValueError, match=needle):
        preset_spec(name, shared_prefix=share)
