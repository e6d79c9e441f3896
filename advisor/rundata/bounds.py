"""The ranges every number read from a handed file (or flag) must lie in before it sizes
anything: how many GPUs and instances a placement may name, how wide its tensor
parallelism, how many render servers a deployment may get. docs/design/security.md lists
them; each check raises ValueError, which a file's reader turns into a line naming the file
and field."""

from __future__ import annotations

import re

MAX_CONCURRENCY = 1 << 20  # requests in flight (--max-concurrency): more than any engine batches
MAX_BATCHED_TOKENS = 1 << 22  # an engine's token budget per step (--max-num-batched-tokens)
MAX_TP = 64  # tensor-parallel ranks of one instance (several nodes' GPUs)
MAX_INSTANCES = 256  # of one role (replicas, prefillers, decoders) in a placement
MAX_PLACEMENT_GPUS = 1024  # every GPU a placement uses
MAX_NODES = 128
MAX_GPUS_PER_NODE = 72  # an NVL72 domain
MAX_RENDER_SERVERS = 64  # about one core each: a host's cores, not more
MAX_NAME = 80  # characters of a placement's name
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
# collocated-N[-tpT|-dpT], disagg[-bidi]-XpYd[-tpA[-B]], render-split-N
_SHAPES = (re.compile(r"^(?:collocated|render-split)-(\d+)(?:-(?:tp|dp)(\d+))?$"),
           re.compile(r"^disagg(?:-bidi)?-(\d+)p(\d+)d(?:-tp(\d+)(?:-(\d+))?)?$"))


def placement_name(name: str) -> str:
    """`name` where it is a placement's name whose counts are in range: at most
    MAX_INSTANCES of a role, MAX_TP ranks an instance and MAX_PLACEMENT_GPUS in all;
    ValueError otherwise."""
    if len(name) > MAX_NAME or not _NAME.match(name):
        raise ValueError(f"placement {name[:MAX_NAME]!r} is no placement's name (letters, "
                         f"digits and dashes, at most {MAX_NAME})")
    for shape in _SHAPES:
        m = shape.match(name)
        if m is None:
            continue
        if any(len(g) > 6 for g in m.groups() if g):
            raise ValueError(f"placement {name!r}: a count of more than 6 digits")
        n = [int(g) if g else None for g in m.groups()]
        if shape is _SHAPES[0]:
            replicas, width = n[0] or 0, n[1] or 1
            instances, gpus = [replicas], replicas * width
            widths = [width]
        else:
            p, d, a, b = n[0] or 0, n[1] or 0, n[2] or 1, n[3] or n[2] or 1
            instances, gpus, widths = [p, d], p * a + d * b, [a, b]
        if max(instances) > MAX_INSTANCES or max(widths) > MAX_TP or gpus > MAX_PLACEMENT_GPUS:
            raise ValueError(f"placement {name!r}: at most {MAX_INSTANCES} instances of a role, "
                             f"{MAX_TP} GPUs an instance and {MAX_PLACEMENT_GPUS} in all")
    return name


def in_range(value: float | None, low: float, high: float, what: str) -> None:
    """ValueError unless `value` (None: not known) lies in [low, high]."""
    if value is not None and not low <= value <= high:
        raise ValueError(f"{what} must be {low:g} to {high:g}, not {value!r}")
