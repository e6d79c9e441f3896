"""A cap on this process's address space while a hostile input is read, so that a version
of the code that does not bound it fails the test with a MemoryError instead of taking the
machine: 2 GiB above what the process maps already (torch and the libraries map much)."""

import contextlib
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

HEADROOM = 2 << 30


def _mapped() -> int:
    """Bytes this process maps now (VmSize)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def capped() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _mapped() + HEADROOM
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture
def memory_cap() -> Iterator[None]:
    with capped():
        yield
