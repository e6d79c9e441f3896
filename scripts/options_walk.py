"""Which modules read one sweep's options, in order: a short bundled sweep (`tiny`, one
rate) with every attribute read of its SweepOptions logged by the reading module. Prints
how many modules read them besides the options' own, in how many stays (a module read
from until another is), and how many stays return to a module already left.

Usage: python scripts/options_walk.py OUT_DIR   (about a minute on 2 cores)
"""

from __future__ import annotations

import json
import sys

from advisor.sweep import options

OWN = options.__name__


def main(out: str) -> None:
    seq: list[str] = []
    read = object.__getattribute__

    def spy(self: options.SweepOptions, name: str) -> object:
        mod = sys._getframe(1).f_globals.get("__name__", "?")
        if not name.startswith("__") and mod.startswith("advisor") and mod != OWN \
                and (not seq or seq[-1] != mod):
            seq.append(mod)
        return read(self, name)

    options.SweepOptions.__getattribute__ = spy  # type: ignore[method-assign]
    from advisor.sweep.command import sweep_command

    sweep_command(options.SweepOptions(model="tiny", dtype="float32", rates=(2.0,),
                                       num_prompts=6, scale=0.02, output_scale=0.05, out=out,
                                       time_budget=0), report=False)
    left = set(seq[:1])
    returns = 0
    for mod in seq[1:]:
        returns += mod in left
        left.add(mod)
    print(json.dumps({"modules": len(set(seq)), "stays": len(seq), "returns": returns,
                      "order": seq}))


if __name__ == "__main__":
    main(sys.argv[1])
