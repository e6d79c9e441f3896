"""`nvidia-smi topo -p2p r` parsed into a GPU-pair matrix of P2P read statuses.

Real outputs vary: a title line or none, tabs or runs of spaces, leading
spaces before row labels, ANSI colour codes around the header, trailing tabs,
a legend with or without blank lines, a single GPU. The parser keys on what is
stable: a header line of GPU labels, then one row per label.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from advisor.errors import UsageError

CODES = {
    "X": "self (the same GPU)",
    "OK": "peer-to-peer read supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by regkey",
    "U": "unknown",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"^GPU\d+$")


@dataclass
class P2PMatrix:
    gpus: list[str]
    status: list[list[str]]  # status[i][j]: can GPU i read from GPU j

    def pair(self, i: int, j: int) -> str:
        return self.status[i][j]

    @property
    def all_ok(self) -> bool:
        """True when every distinct pair supports P2P reads (and there is a pair)."""
        n = len(self.gpus)
        return n > 1 and all(
            self.status[i][j] == "OK" for i in range(n) for j in range(n) if i != j
        )

    def to_json(self) -> dict:
        return {
            "gpus": self.gpus,
            "status": self.status,
            "legend": {c: CODES[c] for c in sorted({s for row in self.status for s in row})},
        }


def parse(text: str) -> P2PMatrix:
    """Parse a saved or live output; UsageError when no matrix is found or it is malformed."""
    lines = [_ANSI.sub("", raw).strip() for raw in text.splitlines()]
    header_at, gpus = None, []
    for k, line in enumerate(lines):
        tokens = line.split()
        if tokens and all(_GPU.match(t) for t in tokens):
            header_at, gpus = k, tokens
            break
    if header_at is None:
        raise UsageError("no GPU header line (GPU0 GPU1 ...) found in the P2P output")
    status = []
    for line in lines[header_at + 1 :]:
        tokens = line.split()
        if not tokens or not _GPU.match(tokens[0]):
            if status:  # the matrix ended (legend follows)
                break
            continue
        if tokens[0] != gpus[len(status)] or len(tokens) != len(gpus) + 1:
            raise UsageError(
                f"malformed P2P row {line!r}: expected {gpus[len(status)]} and {len(gpus)} statuses"
            )
        row = tokens[1:]
        unknown = [s for s in row if s not in CODES]
        if unknown:
            raise UsageError(f"unknown P2P status {unknown[0]!r} in row {tokens[0]}")
        status.append(row)
        if len(status) == len(gpus):
            break
    if len(status) != len(gpus):
        raise UsageError(f"P2P matrix has {len(status)} rows for {len(gpus)} GPUs")
    return P2PMatrix(gpus, status)


def query(timeout_s: float = 10.0) -> P2PMatrix | None:
    """The live matrix from nvidia-smi; None when nvidia-smi is absent or fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "topo", "-p2p", "r"], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    try:
        return parse(out.stdout)
    except UsageError:
        return None
