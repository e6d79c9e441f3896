"""The engine server takes vLLM's spelling of what it shares with `vllm serve`: the same
--kv-transfer-config, --max-model-len, prefix-caching flag and NIXL side-channel
environment, mapped onto its own settings, and a clear error for what it cannot take."""

import json

import pytest

from engine.serve import vllm_args
from engine.serve.server_args import engine_config, parser

pytestmark = pytest.mark.unit


def args(*argv: str, env: dict | None = None):
    return vllm_args.apply(parser().parse_args(list(argv)), env or {})


def config(role: str, **extra) -> str:
    cfg = {"kv_connector": "NixlConnector", "kv_role": role, "kv_load_failure_policy": "fail"}
    if extra:
        cfg["kv_connector_extra_config"] = extra
    return json.dumps(cfg)


def test_a_prefiller_and_a_bidirectional_decoder_as_vllm_spells_them():
    env = {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5611", "CUDA_VISIBLE_DEVICES": "0"}
    p = args("--port", "8100", "--no-enable-prefix-caching", "--kv-transfer-config",
             config("kv_producer", kv_lease_duration=60), env=env)
    assert (p.role, p.connector, p.kv_port, p.kv_host, p.port) == (
        "prefill", "shm", 5611, "127.0.0.1", 8100)
    assert p.kv_lease_duration == 60 and not p.keep_conversations
    cfg = engine_config(p)
    assert cfg.role == "prefill" and not cfg.enable_prefix_caching
    d = args("--max-model-len", "1024", "--kv-transfer-config",
             config("kv_consumer", bidirectional_kv_xfer=True, decoder_kv_blocks_ttl=600))
    assert (d.role, d.keep_conversations, d.decoder_kv_ttl) == ("decode", True, 600.0)
    assert engine_config(d).max_model_len == 1024 and engine_config(d).enable_prefix_caching
    # "True" as vLLM's extra config also takes it; a prefiller keeps nothing itself
    assert args("--kv-transfer-config", config("kv_consumer", bidirectional_kv_xfer="True")
                ).keep_conversations
    assert not args("--kv-transfer-config", config("kv_producer", bidirectional_kv_xfer=True)
                    ).keep_conversations


def test_nixl_maps_onto_the_fastest_connector_between_the_two():
    far = args("--kv-transfer-config", config("kv_producer"),
               env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.5"})
    assert far.connector == "tcp" and far.kv_host == "10.0.0.5"
    assert args("--device", "cuda", "--kv-transfer-config", config("kv_producer")
                ).connector == "cuda"
    assert args("--connector", "tcp", "--kv-transfer-config", config("kv_producer")
                ).connector == "tcp"  # a flag of its own wins
    assert args().connector == "shm" and args().role == "both"


@pytest.mark.parametrize("argv,env,needle", [
    (["--kv-transfer-config", "{nope"], {}, "is not JSON"),
    (["--kv-transfer-config", "[1]"], {}, "must be a JSON object"),
    (["--kv-transfer-config", config("kv_both")], {}, "kv_role 'kv_both'"),
    (["--kv-transfer-config", json.dumps({"kv_connector": "LMCacheConnectorV1",
                                          "kv_role": "kv_producer"})], {}, "LMCacheConnectorV1"),
    (["--kv-transfer-config", json.dumps({"kv_role": "kv_producer", "kv_rol": 1})], {},
     "unknown field 'kv_rol'"),
    (["--role", "decode", "--kv-transfer-config", config("kv_producer")], {}, "contradicts"),
    (["--tensor-parallel-size", "2"], {}, "one device"),
    ([], {"VLLM_NIXL_SIDE_CHANNEL_PORT": "five"}, "is not a port"),
])
def test_what_it_cannot_take_is_named(argv, env, needle):
    with pytest.raises(ValueError, match=needle):
        args(*argv, env=env)
