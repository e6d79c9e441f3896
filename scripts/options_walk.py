"""Which modules read one sweep's options, in order: a short bundled sweep (`tiny`, one
rate) with every attribute read of its SweepOptions logged by the reading module. Prints
how many modules read them besides the options' own, in how many stays (a module read
from until another is), and how many stays return to a module already left; then the same
for two options alone, `--engine` and `--slo`: the modules each is read in, in order.

Usage: python scripts/options_walk.py OUT_DIR   (about a minute on 2 cores)
"""

from __future__ import annotations

import json
import sys

from advisor.sweep import options

OWN = options.__name__
# the options whose walks are printed alone, by the attributes that carry them (older
# versions read the SLO parsed as `slos`)
FOLLOWED = {"engine": "--engine", "bundled": "--engine", "slo": "--slo", "slos": "--slo",
            "judged_slo": "--slo"}


def walk(seq: list[str]) -> dict[str, object]:
    """Modules, stays and returns of a sequence of reading modules."""
    stays = [m for i, m in enumerate(seq) if i == 0 or seq[i - 1] != m]
    left = set(stays[:1])
    returns = 0
    for mod in stays[1:]:
        returns += mod in left
        left.add(mod)
    return {"modules": len(set(stays)), "stays": len(stays), "returns": returns,
            "order": stays}


def main(out: str) -> None:
    seq: list[str] = []
    followed: dict[str, list[str]] = {flag: [] for flag in FOLLOWED.values()}
    read = object.__getattribute__

    def spy(self: options.SweepOptions, name: str) -> object:
        mod = sys._getframe(1).f_globals.get("__name__", "?")
        if not name.startswith("__") and mod.startswith("advisor") and mod != OWN:
            seq.append(mod)
            if name in FOLLOWED:
                followed[FOLLOWED[name]].append(mod)
        return read(self, name)

    options.SweepOptions.__getattribute__ = spy  # type: ignore[method-assign]
    from advisor.sweep.command import sweep_command

    sweep_command(options.SweepOptions(model="tiny", dtype="float32", rates=(2.0,),
                                       num_prompts=6, scale=0.02, output_scale=0.05, out=out,
                                       time_budget=0), report=False)
    print(json.dumps({**walk(seq), **{flag: walk(m) for flag, m in followed.items()}}))


if __name__ == "__main__":
    main(sys.argv[1])
