"""A front is ready when its /health says so: one that answers 503 there (none of its
instances up yet) is waited for, though its /v1/models, passed on to an instance, may
answer 200 already; a server with no /health is judged by /healthcheck or /v1/models."""

import pytest
from aiohttp import web

from advisor.errors import UsageError
from advisor.measure.ready import wait_ready
from tests.serving.helpers import running_app

pytestmark = pytest.mark.integration


def _app(health: int | None) -> web.Application:
    app = web.Application()
    if health is not None:
        app.router.add_get("/health", lambda _: web.Response(status=health))
    app.router.add_get("/v1/models", lambda _: web.json_response({"data": [{"id": "m"}]}))
    return app


def test_a_front_whose_health_says_503_is_not_ready_whatever_its_models_say():
    with running_app(_app(503)) as url, pytest.raises(UsageError, match="HTTP 503"):
        wait_ready(url, None, timeout_s=1.5)


@pytest.mark.parametrize("health", [200, None])
def test_ready_by_health_or_without_it_by_models(health):
    with running_app(_app(health)) as url:
        wait_ready(url, None, timeout_s=5)
