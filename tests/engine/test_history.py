"""Does a chat template render a turn's history as the decoder computed it?"""

from pathlib import Path

from engine.render.history import check_history
from engine.render.tokenizer import TextTokenizer

DROPS_THINK = Path(__file__).parents[1] / "fixtures" / "templates" / "qwen3_drops_think.jinja"


def test_the_default_template_keeps_the_whole_history():
    c = check_history(TextTokenizer.load())
    assert c.share == 1.0 and c.dropped is None


def test_a_qwen3_style_template_that_drops_reasoning_is_caught():
    c = check_history(TextTokenizer.load(chat_template=str(DROPS_THINK)))
    assert c.dropped == "earlier reasoning (<think> blocks)"
    assert 0 < c.share < 0.5  # the reply's reasoning is most of it
