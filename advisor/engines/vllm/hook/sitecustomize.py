"""Imported at start-up by every Python process of a vLLM instance that advisor starts on CPU
cores (this directory is put on its PYTHONPATH). NIXL's UCX progress thread polls without
pause (nixl's Python API sets its delay, pthrDelay, to 0) and vLLM offers no setting for it:
on a host where each instance has one core, it took that core, idle or not. With
ADVISOR_NIXL_PROGRESS_THREAD=off the agent is made without it, and vLLM's own transfer-status
checks, once per engine step, progress the transfers. The patch is applied when NIXL's API
module is first imported."""

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Sequence
from typing import Any

NIXL_APIS = ("nixl_cu12._api", "nixl_cu13._api", "nixl_rocm._api")


def _defaulted(cls: type, name: str, value: object) -> None:
    """`cls(...)` with keyword `name` defaulting to `value`."""
    init = getattr(cls, "__init__")  # noqa: B009  (mypy: no instance access)

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault(name, value)
        init(self, *args, **kwargs)

    setattr(cls, "__init__", __init__)  # noqa: B010


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds each patched module as the path finder would, and patches it once it has run."""

    def __init__(self, patches: dict[str, Any]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run, patch = spec.loader.exec_module, self.patches[name]

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            patch(module)

        setattr(spec.loader, "exec_module", exec_module)  # noqa: B010  (a method, replaced)
        return spec


_patches = {}
if os.environ.get("ADVISOR_NIXL_PROGRESS_THREAD") == "off":
    for _name in NIXL_APIS:
        _patches[_name] = lambda m: _defaulted(m.nixl_agent_config, "enable_prog_thread", False)
if _patches:
    sys.meta_path.insert(0, _PatchOnImport(_patches))
