"""Chat templates render as Hugging Face transformers (and so vLLM) renders them: a template
written for trimmed blocks, tools in their own key order and unescaped, loop controls, and a
template's own refusal a ValueError (the servers' 400), not a crash."""

import pytest

from engine.render.tokenizer import TextTokenizer, template_environment

pytestmark = pytest.mark.unit

TOOL = {"type": "function", "function": {"name": "f<x>", "parameters": {"type": "object"}}}


def test_blocks_are_trimmed_and_tools_keep_their_key_order_unescaped():
    t = template_environment().from_string(
        "<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>\n"
        "  {% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m }}"
        "{% endfor %}")
    assert t.render(tools=[TOOL], messages=["a", "b"]) == (
        '<tools>{"type": "function", "function": {"name": "f<x>", "parameters": '
        '{"type": "object"}}}</tools>\na')


def test_a_templates_refusal_is_a_value_error():
    tok = TextTokenizer.load()
    tok.template = template_environment().from_string(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('roles must alternate') }}"
        "{% endif %}")
    with pytest.raises(ValueError, match="roles must alternate"):
        tok.render_chat([{"role": "assistant", "content": "x"}])
