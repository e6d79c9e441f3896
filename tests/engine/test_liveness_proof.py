"""A front checks each answer for the deployment's proof: one without it is never passed on,
but only an answer that is no client error takes the instance out of the rotation, so that a
client whose request an instance's HTTP parser refuses (a bare 400 before the app adds the
proof) cannot eject it (issue 56, item 2)."""

import pytest
from multidict import CIMultiDict

from engine.core import deployment
from engine.fronts.liveness import Impostor, Liveness
from engine.serve.http_app import NONCE_HEADER, PROOF_HEADER

pytestmark = pytest.mark.unit
URL = "http://127.0.0.1:9"
SECRET = b"s" * 32


class Answer:
    def __init__(self, status: int, proof: str | None):
        self.status = status
        self.headers = CIMultiDict({PROOF_HEADER: proof} if proof else {})


@pytest.mark.parametrize("status,ejected", [(400, False), (413, False), (200, True),
                                            (500, True), (502, True)])
def test_an_answer_without_proof_is_refused_and_ejects_only_when_no_client_error(status, ejected):
    live = Liveness([URL], SECRET)
    with pytest.raises(Impostor):
        live.ours(URL, {NONCE_HEADER: "n1"}, Answer(status, None))
    assert (URL in live.down) is ejected


def test_a_proven_answer_passes_whatever_its_status():
    live = Liveness([URL], SECRET)
    for status in (200, 400, 503):
        live.ours(URL, {NONCE_HEADER: "n2"},
                  Answer(status, deployment.proof(SECRET, "n2", 9)))
    assert not live.down
