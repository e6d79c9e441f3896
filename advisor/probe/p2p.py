"""`nvidia-smi topo -p2p r` (P2P read status) and `nvidia-smi topo -m` (the path between
two GPUs) parsed into one GPU-pair matrix.

Real outputs vary: a title line or none, tabs or runs of spaces, leading spaces before row
labels, ANSI colour codes around the header, trailing tabs, NIC and affinity columns after
the GPUs, a legend with or without blank lines, a single GPU. The parser keys on what is
stable: a header line that starts with GPU labels, then one row per label. A file may hold
both outputs (`{ nvidia-smi topo -p2p r; nvidia-smi topo -m; } > topo.txt`).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Any

from advisor.errors import UsageError
from advisor.rundata.manifest import P2PRecord
from advisor.rundata.typed_json import to_json

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
PATHS = {
    "NV#": "a bonded set of # NVLinks",
    "PIX": "at most one PCIe bridge",
    "PXB": "several PCIe bridges, not the host bridge",
    "PHB": "a PCIe host bridge (the CPU)",
    "NODE": "the link between PCIe host bridges in one NUMA node",
    "SYS": "the SMP interconnect between NUMA nodes (QPI/UPI)",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"^GPU\d+$")
_NV = re.compile(r"^NV\d+$")


def _path_code(code: str) -> bool:
    return code in PATHS or bool(_NV.match(code))


@dataclass
class P2PMatrix:
    gpus: list[str]
    status: list[list[str]]  # status[i][j]: can GPU i read from GPU j (CODES)
    paths: list[list[str]] | None = None  # paths[i][j]: topo -m's path code, where given

    def pair(self, i: int, j: int) -> str:
        return self.status[i][j]

    def between(self, a: int, b: int) -> str:
        """The P2P status between GPUs a and b both ways: OK only where each reads the
        other (bidirectional transfer reads both ways), else the first direction that
        does not."""
        return self.status[b][a] if self.status[b][a] != "OK" else self.status[a][b]

    def ok(self, a: int, b: int) -> bool:
        return self.between(a, b) == "OK"

    def label(self, a: int, b: int) -> str:
        """`STATUS` or `STATUS over PATH` (with topo -m's path)."""
        path = f" over {self.paths[a][b]}" if self.paths else ""
        return self.between(a, b) + path

    def ok_pairs(self) -> list[tuple[int, int]]:
        """Every pair of distinct GPUs (a < b) with P2P both ways."""
        n = len(self.gpus)
        return [(a, b) for a in range(n) for b in range(a + 1, n) if self.ok(a, b)]

    @property
    def all_ok(self) -> bool:
        """True when every distinct pair supports P2P reads (and there is a pair)."""
        n = len(self.gpus)
        return n > 1 and len(self.ok_pairs()) == n * (n - 1) // 2

    @classmethod
    def from_record(cls, r: P2PRecord) -> P2PMatrix:
        """The matrix `record` wrote (a manifest's probe.p2p)."""
        return cls(list(r.gpus), [list(row) for row in r.status],
                   [list(row) for row in r.paths] if r.paths else None)

    def record(self) -> P2PRecord:
        """The matrix with its legend, as a manifest keeps it."""
        codes = sorted({s for row in self.status for s in row})
        legend = {c: CODES[c] for c in codes}
        if self.paths:
            for p in sorted({s for row in self.paths for s in row} - {"X"}):
                legend[p] = PATHS.get(p) or PATHS["NV#"].replace("#", p[2:])
        return P2PRecord(self.gpus, self.status, legend, self.paths)

    def to_json(self) -> dict[str, Any]:
        """`record` as JSON (what `advisor probe --json` prints)."""
        return {k: v for k, v in to_json(self.record()).items() if v is not None}


def parse(text: str) -> P2PMatrix:
    """Parse a saved or live output of either command, or both; UsageError when no matrix
    is found or one is malformed. From topo -m alone, NVLink pairs read OK and every other
    pair U (unknown): the path does not say whether P2P works over it."""
    lines = [_ANSI.sub("", raw).strip() for raw in text.splitlines()]
    status = paths = None
    gpus: list[str] = []
    k = 0
    while k < len(lines):
        header = _gpu_labels(lines[k].split())
        if not header:
            k += 1
            continue
        rows, k = _rows(lines, k + 1, header)
        if gpus and header != gpus:
            raise UsageError(f"the two matrices name different GPUs ({len(gpus)} and "
                             f"{len(header)})")
        gpus = header
        codes = {c for row in rows for c in row} - {"X"}
        if codes and all(_path_code(c) for c in codes):
            paths = rows
        else:
            _check_codes(rows, header)
            status = rows
    if not gpus:
        raise UsageError("no GPU header line (GPU0 GPU1 ...) found in the P2P output")
    if status is None:
        status = [["X" if c == "X" else "OK" if _NV.match(c) else "U" for c in row]
                  for row in paths or []]
    return P2PMatrix(gpus, status, paths)


def _gpu_labels(tokens: list[str]) -> list[str]:
    """The leading GPU labels of a header line (topo -m's NIC and affinity columns follow)."""
    labels = []
    for t in tokens:
        if not _GPU.match(t):
            break
        labels.append(t)
    return labels if labels and labels[0] == "GPU0" else []


def _rows(lines: list[str], k: int, gpus: list[str]) -> tuple[list[list[str]], int]:
    """The matrix rows from line k: each GPU's label and one code per GPU (columns after
    them ignored); the rows and the line after them."""
    rows: list[list[str]] = []
    while k < len(lines) and len(rows) < len(gpus):
        tokens = lines[k].split()
        k += 1
        if not tokens or not _GPU.match(tokens[0]):
            if rows:  # the matrix ended early (legend follows)
                break
            continue
        if tokens[0] != gpus[len(rows)] or len(tokens) < len(gpus) + 1:
            raise UsageError(f"malformed P2P row {' '.join(tokens)!r}: expected "
                             f"{gpus[len(rows)]} and {len(gpus)} statuses")
        rows.append(tokens[1:len(gpus) + 1])
    if len(rows) != len(gpus):
        raise UsageError(f"P2P matrix has {len(rows)} rows for {len(gpus)} GPUs")
    return rows, k


def _check_codes(rows: list[list[str]], gpus: list[str]) -> None:
    for label, row in zip(gpus, rows):
        unknown = [s for s in row if s not in CODES and not _path_code(s)]
        mixed = [s for s in row if _path_code(s)]
        if unknown or mixed:
            raise UsageError(f"unknown P2P status {(unknown or mixed)[0]!r} in row {label}")


def read(path: str | None, flag: str = "--p2p-matrix") -> tuple[P2PMatrix | None, str | None]:
    """The matrix from a saved output at `path`, else the live one from nvidia-smi, with
    where it came from; (None, None) with neither. UsageError naming `flag` for a file that
    cannot be read or parsed."""
    if path:
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise UsageError(f"{flag} {path}: {e.strerror or e}") from None
        try:
            return parse(text), path
        except UsageError as e:
            raise UsageError(f"{flag} {path}: {e}") from None
    matrix = query()
    return (matrix, "nvidia-smi topo -p2p r") if matrix else (None, None)


def query(timeout_s: float = 10.0) -> P2PMatrix | None:
    """The live matrix from nvidia-smi (P2P read status, with topo -m's paths where that
    answers too); None when nvidia-smi is absent or fails."""
    texts = []
    for args in (["topo", "-p2p", "r"], ["topo", "-m"]):
        try:
            out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                                 timeout=timeout_s)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode == 0:
            texts.append(out.stdout)
    if not texts:
        return None
    try:
        return parse("\n".join(texts))
    except UsageError:
        return None
