"""Linear layers whose decode-sized matmuls run on oneDNN's pre-packed weights (CPU).

A decode step multiplies a few rows by every weight matrix, so it is bound by how
fast the kernel streams the weights. torch's default CPU kernel for a row-major
weight reaches ~8 GB/s in bfloat16 on one thread here, against ~11 for the same
weight re-laid out once by oneDNN for small batches (`benchmarks/engine_bench.py`
shows the step against its read-bandwidth roofline). Prefill-sized inputs keep
torch's kernel, which is as fast or faster for them, except the MLP's gate and up in
bfloat16 (`gated`): packed apart, with the SiLU and the product in oneDNN's epilogues,
the 4 MLPs of `small` on 2048 rows took 229-241 ms against 260-281 (Xeon, AMX-BF16).

The packed copy sits beside the original weight (state dicts, weight loading and
prefill see the plain parameter), so packing costs the weights' size in memory once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SMALL_BATCH = 128  # rows up to which the packed kernel is used (decode batches)
_PACK_FOR = 32  # the batch size oneDNN lays the weight out for
# NOTE: in float32 at 1-2 rows torch's kernel (MKL's GEMV) streams the weights at the
# read limit, ~9 GB/s on one thread, and the packed kernel at 7.4-7.9: 8-25% slower on
# `small`'s shapes, 1.5-2x faster from 4 rows (Xeon with AVX-512 and no BF16). In
# bfloat16 the packed kernel is the faster one from 2 rows; at 1 row torch's matrix-vector
# product on the plain weight streams it faster still: `small`'s step of GEMVs 16.0 against
# 21.0 ms (median of 10 alternating rounds), a decode step at batch 1 18.2 against 22.4
# and 16.9 against 18.8 ms in two runs of 12 alternating rounds, the same bits out on
# `small`'s shapes (Xeon with AMX-BF16, one thread, 2026-12-02); two or four mv calls
# for 2 or 4 rows took 1.6x and 2.6x the packed kernel.
GEMV_ROWS = 2
# NOTE: with AMX, oneDNN's bfloat16 kernel for 17-32 rows streams the weights slower than
# the one for 33-48: `small`'s projections and head took 15.0 ms at 32 rows against 13.3-14.2
# at 36-48 on an idle host, 27-32 against 19-22 while neighbours loaded it (Xeon, one
# thread; 16 rows: 12.8 and 18.5-20.5). Such batches run padded to 48 rows there.
_SKIP_32 = hasattr(torch.cpu, "_is_amx_tile_supported") and torch.cpu._is_amx_tile_supported()


def can_pack(weight: torch.Tensor) -> bool:
    """Whether this torch build, on this CPU, can pack `weight` for the small-batch kernel.

    # NOTE: oneDNN's bfloat16 kernels need AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT; on an
    # AVX2-only CPU (Zen 3) packing a bfloat16 weight raised, so `--dtype bfloat16` failed
    # to load any model there. Such weights keep torch's kernel."""
    return (
        weight.device.type == "cpu"
        and weight.dtype in (torch.float32, torch.bfloat16)
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and (weight.dtype == torch.float32 or torch.ops.mkldnn._is_mkldnn_bf16_supported())
    )


def pack(weight: torch.Tensor) -> torch.Tensor | None:
    """oneDNN's layout of `weight` [out, in] for small batches, or None where unsupported."""
    if not can_pack(weight):
        return None
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_FOR)


def vector_layout(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] with the same values stored column-major (its transpose
    contiguous) where torch's kernel multiplies vectors by that layout faster: float32 on
    the CPU. Anything else comes back as it is; so does a weight already laid out so.

    # NOTE: x @ W^T at one row streams W [out, in] row by row as dot products; stored
    # column-major it streams W^T's rows into the output instead. On a Zen 3 (AVX2, MKL,
    # one thread, float32) `small`'s step of GEMVs ran at 1.02 of the read limit that way
    # against 0.83 row-major (median of 15 alternating rounds; 2 rows 36.6 against 50.2 ms,
    # the packed kernel 40.6); prefill's GEMMs at 128-2048 rows took the same either way
    # (0.99-1.03). bfloat16 keeps its layout: its one-row kernel (torch.mv, below) was
    # measured on the plain weight. Not measured with it: float32 on an AVX-512 Xeon."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return weight
    return weight.t().contiguous().t()


def rows_for(n: int, skip_32: bool = False) -> int:
    """The row count the packed kernel runs `n` rows at: 1, 2, 4, 8, then multiples of 16
    up to 256 (48 instead of 32 with `skip_32`), then of 1/8 of the power of two below `n`
    (at most 1/8 more rows).

    NOTE: oneDNN compiles and caches one kernel per shape; every distinct batch size made
    a new one, and a server's RSS crept up for as long as new sizes kept arriving (~60 MB
    over 2400 requests with `tiny`). Twelve shapes per weight up to SMALL_BATCH bound it;
    the padded rows cost nothing that shows in a step bound by streaming the weights."""
    if n <= 8:
        return 1 << (n - 1).bit_length()
    step = max(16, 1 << (n.bit_length() - 4))
    rows = -(-n // step) * step
    return 48 if skip_32 and rows == 32 else rows


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
           packed: torch.Tensor | None) -> torch.Tensor:
    """x: [T, in] -> [T, out]; the packed kernel for T <= SMALL_BATCH when there is one,
    but for float32 vectors (T <= GEMV_ROWS), where torch's own kernel is faster, and one
    bfloat16 row, where torch's matrix-vector product is."""
    n = x.shape[0]
    if packed is None or n > SMALL_BATCH or (n <= GEMV_ROWS and x.dtype == torch.float32):
        return F.linear(x, weight, bias)
    if n == 1:  # NOTE: bfloat16 here (packed, not float32)
        y = torch.mv(weight, x[0]) if bias is None else torch.addmv(bias, weight, x[0])
        return y.unsqueeze(0)  # [1, out]
    return torch.ops.mkldnn._linear_pointwise(_padded(x), packed, bias, "none", [], "")[:n]


def packed_rows(dtype: torch.dtype) -> list[int]:
    """Every row count the packed kernel runs at: `rows_for` of 1..SMALL_BATCH rows."""
    skip = _SKIP_32 and dtype == torch.bfloat16
    return sorted({rows_for(n, skip) for n in range(1, SMALL_BATCH + 1)})


def warm(weight: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None) -> None:
    """Run `linear` once at every row count the packed kernel runs at, so that oneDNN
    builds each of its kernels now instead of inside a step.

    # NOTE: oneDNN compiles a kernel per row count on its first call: 1-5 ms more per
    # weight at 4-128 rows (Xeon, bfloat16, one of `small`'s MLP weights, with the
    # allocator already warm), so a step whose batch first reached a row count stalled
    # every running request by ~20-80 ms over `small`'s 17 weights, in whichever measured
    # run first reached it. ~0.2 s per engine start."""
    if packed is None:
        return
    for rows in packed_rows(weight.dtype):
        linear(torch.zeros(rows, weight.shape[1], dtype=weight.dtype, device=weight.device),
               weight, bias, packed)


def _padded(x: torch.Tensor) -> torch.Tensor:
    """x: [T, in] -> [rows_for(T), in], zero rows below (the real rows' results do not
    depend on them)."""
    n = x.shape[0]
    rows = rows_for(n, _SKIP_32 and x.dtype == torch.bfloat16)
    return x if rows == n else F.pad(x, (0, 0, 0, rows - n))


def can_gate(weight: torch.Tensor) -> bool:
    """Whether `gated` runs for this gate|up weight: packable, in bfloat16 (where oneDNN's
    epilogues were measured to pay, above; bfloat16 is only chosen where it is native)."""
    return (weight.dtype == torch.bfloat16 and can_pack(weight)
            and hasattr(torch.ops.mkldnn._linear_pointwise, "binary"))


def gated(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(x @ gate^T) * (x @ up^T) for x: [T, in] -> [T, inter], on packed halves
    (`pack`), the SiLU and the product done in the GEMMs' epilogues instead of two more
    passes over [T, inter]. Rows are padded as `rows_for` says (kernels per shape)."""
    n, x = x.shape[0], _padded(x)  # x: [rows, in]
    g = torch.ops.mkldnn._linear_pointwise(x, gate, None, "swish", [], "")  # [rows, inter]
    return torch.ops.mkldnn._linear_pointwise.binary(x, g, up, None, "mul")[:n]


class Linear(nn.Linear):
    """nn.Linear with an optional packed copy of its weight (see `pack_weights`)."""

    packed: torch.Tensor | None = None

    def pack_weights(self) -> None:
        """Lay the current weight out for small batches (and build its kernels: `warm`)
        and for vectors (`vector_layout`: the weight itself, the same values); call again
        after changing it."""
        self.packed = pack(self.weight)
        self.weight.data = vector_layout(self.weight.data)
        warm(self.weight, self.bias, self.packed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.packed)
