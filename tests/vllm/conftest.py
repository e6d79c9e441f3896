"""Real vLLM (vLLM's CPU build in .tools/vllm, installed by .ci/vllm): the tests here start
it. Where it is not installed they are skipped, and CI, which installs it, runs them."""

import pytest

from advisor.errors import UsageError
from advisor.vllm_engine.locate import find_vllm
from advisor.vllm_engine.model_dir import model_dir
from advisor.vllm_engine.runtime import VllmSettings

MODEL = "mini"  # the smallest preset vLLM's CPU attention takes


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.vllm)
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def vllm_settings(tmp_path_factory):
    """How the tests start vLLM: the mini preset's directory, float32, its whole context."""
    try:
        install = find_vllm()
    except UsageError as e:
        pytest.skip(str(e))
    directory, dummy = model_dir(MODEL, "float32", tmp_path_factory.mktemp("models"))
    return VllmSettings(install, directory, MODEL, "float32", 2048, "cpu", dummy)
