"""Option groups declared once, for every verb that takes them: the engine to start
(`--engine`, parsed here into a typed value), the model with its dtype and device, and the
SLO (`--slo`, `--goodput`: parsed here into an `Slo`). A verb's options dataclass declares
each with these functions, so a flag's spelling, help and parsing exist in one place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

from advisor.errors import UsageError
from advisor.flags import option
from advisor.rundata.slo import Slo, parse_slo

EngineKind = Literal["bundled", "vllm"]
ENGINE_KINDS: tuple[EngineKind, ...] = get_args(EngineKind)
# the model each engine runs when --model is not given: vLLM's CPU attention takes head
# sizes of 32 and up, which `small` (16) is not
DEFAULT_MODELS: dict[EngineKind, str] = {"bundled": "small", "vllm": "mini"}
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")


def parse_engine(text: str) -> EngineKind:
    """--engine's value; UsageError naming the flag where it is no engine started here."""
    for kind in ENGINE_KINDS:
        if text == kind:
            return kind
    raise UsageError(f"--engine must be {' or '.join(ENGINE_KINDS)}, not {text!r}")


def engine_option(default: EngineKind | None, help: str) -> Any:
    """--engine: the engine the verb starts here (bundled or vllm)."""
    return option(default, help, parse=parse_engine)


def model_option(help: str = "preset name or a local HF model directory (default: small; "
                             "--engine vllm: mini)") -> Any:
    """--model: what an engine started here serves (None: the engine's default)."""
    return option(None, help)


def dtype_option() -> Any:
    """--dtype: the engine's, `auto` resolved once where it starts."""
    return option("auto", "auto (bfloat16 where fast here, else float32), float32, bfloat16 "
                           "or float16")


def device_option() -> Any:
    """--device: the engine's."""
    return option("cpu", "cpu or cuda")


def slo_option(default: Slo | None, help: str, *decls: str) -> Any:
    """An SLO flag (`--slo`, `--goodput`): NAME:MS items, also as the words after it, as
    vLLM's --goodput takes them."""
    flag = decls[0] if decls else "--slo"
    return option(default, help, *decls, words=True,
                  parse=lambda items: _slo_or_default(items, flag, default))


def _slo_or_default(items: Sequence[str], flag: str, default: Slo | None) -> Slo | None:
    return parse_slo(items, flag) if items else default
