"""KV connectors, one module each: the module's name is the connector's name, and the
module's `CONNECTOR` its KVConnector class. Adding a transport means adding a file here.

Listing the names imports nothing (no torch), so command lines can offer them cheaply.
"""

from __future__ import annotations

import pkgutil
from importlib import import_module
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # torch's: listing the names must not load it
    from engine.kv.connector import KVConnector
    from engine.kv.links import LinkEmulation

NAMES: tuple[str, ...] = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)))


def get(name: str, emulation: LinkEmulation | None = None) -> KVConnector:
    """A connector by name; with a `LinkEmulation`, wrapped so each transfer lasts as long
    as on that link. ValueError for an unknown name."""
    if name not in NAMES:
        raise ValueError(f"connector must be one of {', '.join(NAMES)}, not {name!r}")
    connector = import_module(f"{__name__}.{name}").CONNECTOR()
    if emulation is None:
        return cast("KVConnector", connector)
    from engine.kv.emulated import EmulatedLink

    return EmulatedLink(connector, emulation)
