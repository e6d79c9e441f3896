import pytest

from engine.model.weights import hf_state_dict
from tests.engine.helpers import make_llm


@pytest.fixture(scope="session")
def tiny_reference():
    """(HF-named weights, model config) of the tiny preset at seed 0."""
    llm = make_llm()
    return hf_state_dict(llm.engine.runner.model), llm.config
