"""Element types cutegen knows, with the facts every contract needs about them.

One table, read by the model, the legality rules, the renderers and the runner.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str            # cutegen spelling: bf16, f16, tf32, e4m3, e5m2, f32
    bits: int
    cutlass: str         # C++ type in CUTLASS
    tma: str             # CUtensorMapDataType as CUTLASS encodes the operand (copy_sm90_desc.hpp:204-237)
    wgmma_k: int | None  # dense WGMMA K for this input type (PTX 9.7.15.2); None: not a WGMMA input
    is_float: bool = True

    @property
    def bytes(self) -> float:
        return self.bits / 8


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("bf16", 16, "cutlass::bfloat16_t", "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 16),
        DType("f16", 16, "cutlass::half_t", "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 16),
        DType("tf32", 32, "cutlass::tfloat32_t", "CU_TENSOR_MAP_DATA_TYPE_TFLOAT32", 8),
        DType("e4m3", 8, "cutlass::float_e4m3_t", "CU_TENSOR_MAP_DATA_TYPE_UINT8", 32),
        DType("e5m2", 8, "cutlass::float_e5m2_t", "CU_TENSOR_MAP_DATA_TYPE_UINT8", 32),
        DType("f32", 32, "float", "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", None),
    )
}

INPUT_DTYPES = ("bf16", "f16", "tf32", "e4m3", "e5m2")
OUTPUT_DTYPES = ("f32", "bf16", "f16")
ACC_DTYPES = ("f32",)


def dtype(name: str) -> DType:
    try:
        return DTYPES[name]
    except KeyError:
        raise KeyError(name) from None
