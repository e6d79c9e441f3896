"""Files someone hands over, shaped as no tool writes them (issue 56, item 8): every field of a
guidellm result replaced in turn by a value of another type, a run directory's JSON nested
past the parser, and a deeply nested --config are each one line naming the file (a
UsageError, which the CLI prints and exits 2 on), never a traceback."""

import copy
import json
from pathlib import Path

import pytest

from advisor.errors import UsageError
from advisor.imports.command import run_import
from advisor.imports.options import ImportOptions
from advisor.probe.shapes import shape_of
from advisor.rundata.files import read_json_object
from advisor.sweep.config_file import load

pytestmark = pytest.mark.unit
GUIDELLM = Path(__file__).parents[1] / "advisor" / "fixtures" / "imports" / "guidellm" / \
    "benchmarks.json"
HOSTILE = (None, "x", [], {}, -1, 1e308, [[[[]]]], {"a": {"b": None}})


def _paths(obj, path=()):
    """Every path to a value in `obj` (dict keys and list indices), the first 3 of a list."""
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield from _paths(v, (*path, i))


def _replaced(obj, path, value):
    out = copy.deepcopy(obj)
    if not path:
        return value
    *head, last = path
    target = out
    for k in head:
        target = target[k]
    target[last] = value
    return out


def test_every_field_of_an_import_file_of_another_type_is_one_line(tmp_path):
    original = json.loads(GUIDELLM.read_text())
    paths = list(_paths(original))
    paths = paths[::max(1, len(paths) // 60)]  # spread over the file, ~60 of them
    tried = 0
    for i, path in enumerate(paths):
        value = HOSTILE[i % len(HOSTILE)]
        f = tmp_path / f"run-{i}.json"
        f.write_text(json.dumps(_replaced(original, path, value)))
        try:
            run_import(ImportOptions(placement=(f"collocated={f}@1",), out=str(tmp_path / "out"),
                                     report=False))
        except UsageError as e:
            assert "\n" not in str(e)
        tried += 1
    assert tried >= 50


def test_json_nested_past_the_parser_in_a_run_directory_is_one_line(tmp_path):
    f = tmp_path / "evidence.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="nests deeper"):
        read_json_object(f)


def test_a_deeply_nested_config_file_is_one_line(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text("rates: " + "[" * 20_000 + "]" * 20_000)
    with pytest.raises(UsageError, match="--config"):
        load(str(f))


@pytest.mark.parametrize("config", [
    {"hidden_size": "x", "num_hidden_layers": 2, "num_attention_heads": 2},
    {"hidden_size": 64, "num_hidden_layers": [], "num_attention_heads": {"a": 1}},
    [1, 2, 3], "[" * 100_000 + "]" * 100_000])
def test_a_hostile_model_config_for_the_planner_is_one_value_error(tmp_path, config):
    (tmp_path / "config.json").write_text(config if isinstance(config, str)
                                          else json.dumps(config))
    with pytest.raises(ValueError, match=str(tmp_path)):
        shape_of(str(tmp_path))
