"""A measured server's /v1/models is handed input too (issue 67, item 5): the model id it
lists goes through the check a handed model name does, and a list of the wrong shape, or
of megabytes, is one line before any request is sent. Before: a NUL in the id, an int, or
a list of the wrong shape ended in a traceback after the run (its result never written);
a 10 MB id went into every request and a 10 MB result, then `File name too long`."""

import pytest
from aiohttp import web

from tests.cli import advisor_here
from tests.serving.helpers import running_app

pytestmark = pytest.mark.integration


def models_app(body) -> web.Application:
    async def models(_request):
        return web.json_response(body) if not isinstance(body, bytes) else \
            web.Response(body=body, content_type="application/json")

    async def health(_request):
        return web.json_response({"status": "ok"})

    app = web.Application(client_max_size=64 << 20)
    app.add_routes([web.get("/v1/models", models), web.get("/health", health)])
    return app


@pytest.mark.parametrize("body,needle", [
    ({"data": [{"id": "a\x00b"}]}, "is not a model name"),
    ({"data": [{"id": 7}]}, "is not a model name"),
    ({"data": "x"}, "data must be a list of models"),
    ({"data": [1, 2]}, "data must be a list of models"),
    ({"data": [{"id": "m" * 10_000_000}]}, "not the JSON a model list is: longer than"),
    (b"[" * 100_000, "not the JSON a model list is"),
    ({"data": [{"id": "-m"}]}, "is not a model name")])
def test_a_hostile_model_list_is_one_line_before_anything_is_sent(tmp_path, body, needle):
    with running_app(models_app(body)) as url:
        r = advisor_here("bench", "--base-url", url, "--num-prompts", "2",
                         "--result-dir", str(tmp_path / "out"))
    assert r.returncode == 2 and needle in r.stderr + r.stdout, r.stderr + r.stdout
    assert not (tmp_path / "out").exists()
