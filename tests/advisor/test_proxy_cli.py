"""`advisor proxy`: bad flags are one line naming the flag and exit 2, before anything binds."""

import pytest

from advisor.proxy import urls
from tests.cli import advisor, advisor_here

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("args,needle", [
    (["--decode", "nope"], "--decode 'nope': expected an http(s) URL"),
    ([], "--decode: give at least one decoder"),
    (["--prefill", "http://127.0.0.1:1", "--decode", "ftp://x"], "--decode 'ftp://x'"),
    (["--decode", "http://127.0.0.1:1", "--bidirectional"], "--bidirectional needs --prefill"),
    (["--decode", "http://127.0.0.1:1", "--port", "70000"], "'--port'"),
])
def test_bad_flags_are_one_line_and_exit_2(args, needle):
    cli = advisor if not args else advisor_here
    r = cli("proxy", *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_urls_may_repeat_or_be_comma_separated():
    assert urls("--decode", ("http://a:1,http://b:2/", "http://c:3")) == [
        "http://a:1", "http://b:2", "http://c:3"]
