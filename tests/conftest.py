import pytest

from engine.model.weights import hf_state_dict
from tests.engine.helpers import make_llm


@pytest.fixture(scope="session")
def tiny_reference():
    """(HF-named weights, model config) of the tiny preset at seed 0."""
    llm = make_llm()
    return hf_state_dict(llm.engine.runner.model), llm.config


def pytest_collection_modifyitems(items):
    """Tiers: a slow test is an integration test too; one marked neither is a unit test."""
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.integration)
        elif not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.unit)
