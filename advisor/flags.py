"""Options declared once: a verb's options are the fields of one dataclass, and each field's
metadata carries its command-line spelling and help, from which the CLI builds its
parameters (advisor.cli.params). No other place restates a default or a help text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class Flag:
    """How a field is given on the command line."""

    help: str
    decls: tuple[str, ...] = ()  # its spellings (default: --the-field-name)
    # the text given (a words flag: its items) -> the field's value; not called without one
    parse: Callable[[Any], Any] | None = None
    envvar: str | None = None  # read from here when the flag is not given
    words: bool = False  # NAME:MS values also taken from the words after it (vLLM's --goodput)
    min: float | None = None
    max: float | None = None

    def name(self, field_name: str) -> str:
        """The flag as a user types it (its first spelling)."""
        return self.decls[0].split("/")[0] if self.decls else "--" + field_name.replace("_", "-")


def option(default: Any, help: str, *decls: str, parse: Callable[[Any], Any] | None = None,
           envvar: str | None = None, words: bool = False, min: float | None = None,
           max: float | None = None, secret: bool = False) -> Any:
    """A dataclass field with its command-line flag; `secret` keeps it out of repr."""
    flag = Flag(help, decls, parse, envvar, words, min, max)
    return field(default=default, metadata={"flag": flag}, repr=not secret)


def flags(cls: type[Any]) -> dict[str, tuple[Field[Any], Flag]]:
    """Each field of `cls` that has a flag, by name, in declaration order."""
    return {f.name: (f, f.metadata["flag"]) for f in fields(cls) if "flag" in f.metadata}
