"""Typer commands built from an options dataclass (advisor.flags): one parameter per
flagged field, and the values given turned back into that dataclass."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

import typer

from advisor.cli.app import app, slo_items, user_errors
from advisor.flags import flags

_KW = inspect.Parameter.KEYWORD_ONLY


def _cli_type(hint: Any) -> Any:
    """What typer parses a field of type `hint` as: X for X | None, list[X] for tuple[X, ...]."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return list[item]  # type: ignore[valid-type]  # a type built at run time, for typer
    return hint


def _parameters(cls: type[Any]) -> list[inspect.Parameter]:
    hints = typing.get_type_hints(cls)
    out = []
    for name, (f, flag) in flags(cls).items():
        kind = list[str] if flag.words else str if flag.parse else _cli_type(hints[name])
        default = None if typing.get_origin(kind) is list or flag.parse else f.default
        opt = typer.Option(default, *flag.decls, help=flag.help, envvar=flag.envvar,
                           min=flag.min, max=flag.max)
        out.append(inspect.Parameter(name, _KW, default=opt, annotation=kind))
    return out


def options_of(cls: type[Any], given: dict[str, Any], ctx: typer.Context | None) -> Any:
    """An instance of `cls` from the flags' values as typer passed them."""
    values = {}
    for name, (f, flag) in flags(cls).items():
        v = given[name]
        if flag.words:
            assert ctx is not None  # a command with word flags is given its context
            items = slo_items(v, ctx)
            v = flag.parse(items) if flag.parse else tuple(items) or f.default
        elif v is None:
            v = f.default
        elif flag.parse:
            v = flag.parse(v)
        elif isinstance(v, list):
            v = tuple(v)
        values[name] = v
    return cls(**values)


def options_command(cls: type[Any], name: str | None = None
                    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(opts, **own)` as a command whose flags are `cls`'s fields (and `fn`'s
    own parameters after the first): it receives them as one `cls`."""
    taken = [n for n, (_, flag) in flags(cls).items()]
    words = any(flag.words for _, flag in flags(cls).values())

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]
        params = _parameters(cls) + [p.replace(kind=_KW) for p in own]
        if words:
            params.insert(0, inspect.Parameter("ctx", _KW, annotation=typer.Context))

        @functools.wraps(fn)
        def command(**given: Any) -> Any:
            ctx = given.pop("ctx", None)
            with user_errors():
                opts = options_of(cls, {n: given.pop(n) for n in taken}, ctx)
            return fn(opts, **given)

        # typer reads the parameters off the signature
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        settings = {"allow_extra_args": True} if words else None
        return app.command(name, context_settings=settings)(command)

    return register
