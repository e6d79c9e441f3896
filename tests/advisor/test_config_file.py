"""`advisor sweep --config FILE`: TOML or YAML options, flags winning, bad keys named."""

import pytest

from advisor.errors import UsageError
from advisor.rundata.slo import Slo
from advisor.sweep.config_file import load, merged
from advisor.sweep.options import SweepOptions
from tests.cli import advisor, said


def test_toml_and_yaml_give_the_same_options(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('model = "tiny"\nslo = ["ttft:2000", "itl:50"]\ndisagg-url = '
                    '"http://127.0.0.1:8192"\ndisagg_metrics = "http://d:8200/metrics"\n'
                    'rates = [0.5, 1]\nready-timeout = 30\n')
    yaml = tmp_path / "s.yaml"
    yaml.write_text("model: tiny\nslo: [ttft:2000, itl:50]\ndisagg-url: http://127.0.0.1:8192\n"
                    "disagg_metrics: http://d:8200/metrics\nrates: [0.5, 1]\nready-timeout: 30\n")
    assert load(str(toml)) == load(str(yaml)) == {
        "model": "tiny", "slo": Slo.of(2000, 50), "disagg_url": "http://127.0.0.1:8192",
        "disagg_metrics": ("http://d:8200/metrics",), "rates": (0.5, 1), "ready_timeout": 30.0}
    opts = merged(SweepOptions(model="small"), str(toml))  # a flag given wins over the file
    assert opts.model == "small" and opts.rates == (0.5, 1) and opts.config.endswith("s.toml")


@pytest.mark.parametrize("text, needle", [
    ("bogus = 1\n", "unknown key 'bogus'"),
    ('api_key = "x"\n', "a secret"),
    ('max-steps = "many"\n', "max-steps must be of type int"),
    ("rates = 1\nrates = 2\n", "s.toml"),
])
def test_a_bad_config_is_one_line_naming_it(tmp_path, text, needle):
    f = tmp_path / "s.toml"
    f.write_text(text)
    with pytest.raises(UsageError, match=needle):
        load(str(f))


def test_the_cli_names_a_bad_config_key_in_one_line(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("disagg-url: http://127.0.0.1:9\nnot_an_option: 3\n")
    p = advisor("sweep", "--config", str(f), timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = said(p.stderr)
    assert "unknown key 'not_an_option'" in line and str(f) in line
