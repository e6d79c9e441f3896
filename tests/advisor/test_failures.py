"""What a run's failed requests say, and when the server refused them all."""

import pytest

from advisor.measure.failures import commonest, reason, refused

pytestmark = pytest.mark.unit

TOO_LONG = "prompt (8394 tokens) + max_tokens (256) exceeds the model's context of 2048 tokens"


def row(status=200, error=None, ok=False):
    return {"status": status, "error": error, "ok": ok}


def test_the_commonest_reason_is_named_with_its_status():
    rows = [row(400, TOO_LONG), row(500, "boom"), row(400, TOO_LONG), row(ok=True)]
    assert commonest(rows) == (3, f"HTTP 400: {TOO_LONG}")
    assert commonest([row(ok=True)]) == (0, None)
    assert reason(None, "timed out after 600 s") == "timed out after 600 s"
    assert reason(200, None) == "no tokens streamed"


def test_a_run_is_refused_only_when_every_request_got_a_4xx_no_load_explains():
    assert refused([row(400, TOO_LONG)] * 3) == f"HTTP 400: {TOO_LONG}"
    assert refused([row(404, "model 'x' not found"), row(400, TOO_LONG), row(404, "model 'x' "
                                                                           "not found")]) \
        == "HTTP 404: model 'x' not found"
    assert refused([row(400, TOO_LONG)] * 2 + [row(ok=True)]) is None  # one was answered
    assert refused([row(429, "rate limited")] * 3) is None  # load: a lower rate may pass
    assert refused([row(408, "request timeout")] * 3) is None
    assert refused([row(500, "boom")] * 3) is None  # the server failed, not refused
    assert refused([row(None, "connection refused")] * 3) is None
    assert refused([]) is None
