"""The bundled engine's placements, kept running between a sweep's passes: a second pass
often comes back to the placement measured first, and an idle placement uses no CPU. Idle
ones stop while less than ROOM of the memory is available when another starts; one that a
command started is never kept (both may need the same GPUs)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from advisor.sweep.deployments import OnDemand

ROOM = 0.5  # the share of memory that must be available for an idle placement to stay up


def roomy(meminfo: str | None = None) -> bool:
    """Whether at least ROOM of this machine's memory is available (/proc/meminfo, or the
    text given); False where it cannot be read."""
    if meminfo is None:
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            return False
    kb = {k: v.split()[0] for k, _, v in (line.partition(":") for line in meminfo.splitlines())
          if k in ("MemTotal", "MemAvailable") and v.split()}
    try:
        return int(kb["MemAvailable"]) >= ROOM * int(kb["MemTotal"])
    except (KeyError, ValueError):
        return False


class KeptDeployments:
    """Placements by name, each started on demand into its own stack inside `outer` (which
    stops whatever is still up when it closes)."""

    def __init__(self, outer: contextlib.ExitStack, room: Callable[[], bool] = roomy):
        self._outer, self._room = outer, room
        self._on: dict[str, tuple[contextlib.ExitStack, OnDemand]] = {}

    def get(self, name: str, start: Callable[[contextlib.ExitStack], tuple[str, list[str], str]]
            ) -> OnDemand:
        """`name`'s deployment: the one kept, else a new one that `start(stack)` brings up
        when first needed (after stopping idle ones while there is no room)."""
        if name not in self._on:
            stack = self._outer.enter_context(contextlib.ExitStack())

            def begin() -> tuple[str, list[str], str]:
                self._make_room(name)
                return start(stack)

            self._on[name] = (stack, OnDemand(begin))
        return self._on[name][1]

    def _make_room(self, name: str) -> None:
        for other, (stack, at) in list(self._on.items()):
            if other != name and at.live and not self._room():
                stack.close()
                del self._on[other]
