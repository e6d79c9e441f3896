"""Linear layers whose decode-sized matmuls run on oneDNN's pre-packed weights (CPU): a
decode step is bound by how fast the kernel streams the weights, and the packed layout
streams them faster than torch's default kernel. Prefill-sized inputs keep torch's kernel
(but the MLP's gate and up in bfloat16, `gated`, with the SiLU and product fused). The
packed copy sits beside the plain weight, which state dicts and loading see."""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

SMALL_BATCH = 128  # rows up to which the packed kernel is used (decode batches)
_PACK_FOR = 32  # the batch size oneDNN lays the weight out for
# rows up to which torch's own kernel streams the weights faster than the packed one:
# in float32 MKL's GEMV reaches the read limit at 1-2 rows, and in bfloat16 torch.mv on the
# plain weight beats the packed kernel at 1 row
GEMV_ROWS = 2
# with AMX, oneDNN's bfloat16 kernel for 17-32 rows streams the weights 10-30% slower
# than the one for 33-48, so such batches run padded to 48 rows there
_SKIP_32 = hasattr(torch.cpu, "_is_amx_tile_supported") and torch.cpu._is_amx_tile_supported()


def can_pack(weight: torch.Tensor) -> bool:
    """Whether this torch build, on this CPU, can pack `weight` for the small-batch kernel:
    oneDNN's bfloat16 kernels need AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT, and on an
    AVX2-only CPU a bfloat16 weight keeps torch's kernel."""
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
    return cast("torch.Tensor | None", torch.ops.mkldnn._reorder_linear_weight(weight.detach(),
                _PACK_FOR))


def vector_layout(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] with the same values stored column-major (its transpose
    contiguous) where torch's kernel multiplies vectors by that layout faster: float32 on
    the CPU. Anything else comes back as it is; so does a weight already laid out so.
    x @ W^T at one row streams W row by row as dot products; column-major, W^T's rows go
    into the output instead, ~20% faster with MKL at one or two rows and the same for
    prefill's GEMMs. bfloat16 keeps its layout, which its one-row kernel (torch.mv) is
    fastest on."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return weight
    return weight.t().contiguous().t()


def rows_for(n: int, skip_32: bool = False) -> int:
    """The row count the packed kernel runs `n` rows at: 1, 2, 4, 8, then multiples of 16
    up to 256 (48 instead of 32 with `skip_32`), then of 1/8 of the power of two below `n`
    (at most 1/8 more rows). oneDNN compiles and caches a kernel per shape, so unbounded
    shapes grow a server's memory for as long as new batch sizes arrive; the padded rows
    cost nothing visible in a step bound by streaming the weights."""
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
    if n == 1:  # bfloat16 here (packed, not float32)
        y = torch.mv(weight, x[0]) if bias is None else torch.addmv(bias, weight, x[0])
        return y.unsqueeze(0)  # [1, out]
    return cast(torch.Tensor, torch.ops.mkldnn._linear_pointwise(_padded(x), packed, bias, "none",
                [], "")[:n])


def packed_rows(dtype: torch.dtype) -> list[int]:
    """Every row count the packed kernel runs at: `rows_for` of 1..SMALL_BATCH rows."""
    skip = _SKIP_32 and dtype == torch.bfloat16
    return sorted({rows_for(n, skip) for n in range(1, SMALL_BATCH + 1)})


def warm(weight: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None) -> None:
    """Run `linear` once at every row count the packed kernel runs at, so that oneDNN
    builds each of its kernels now (~0.2 s per engine start) instead of inside a step,
    where a first reach of a row count would stall every running request by tens of ms."""
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
    return cast(torch.Tensor, torch.ops.mkldnn._linear_pointwise.binary(x, g, up, None, "mul")[:n])


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
