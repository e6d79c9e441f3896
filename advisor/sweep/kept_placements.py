"""A sweep's placements, each started when first needed (`OnDemand`) and kept running
between the sweep's passes: a second pass often comes back to the placement measured
first, and an idle placement uses no CPU. Idle ones stop while less than ROOM of the memory
is available when another starts."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

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


class OnDemand:
    """A placement's deployment, started when first needed: by `start` for the calibration
    (the callable given returns its front URL, metrics URLs and one instance's URL), or by
    the first run that asks for its `urls`. A run that is already in the run directory
    (a resumed sweep) needs none."""

    def __init__(self, start: Callable[[], tuple[str, list[str], str]]) -> None:
        self._start = start
        self._urls: tuple[str, list[str]] | None = None

    @property
    def live(self) -> bool:
        return self._urls is not None

    def start(self) -> str:
        """Start it now; one instance's URL (for the calibration)."""
        url, metrics, one = self._start()
        self._urls = (url, metrics)
        return one

    def urls(self) -> tuple[str, list[str]]:
        """The front URL and metrics URLs, started first if it is not running."""
        if self._urls is None:
            self.start()
        assert self._urls is not None  # start() sets them
        return self._urls


class KeptPlacements:
    """Placements by name, each started on demand into its own stack inside `outer` (which
    stops whatever is still up when it closes)."""

    def __init__(self, outer: contextlib.ExitStack, room: Callable[[], bool] = roomy) -> None:
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
