"""A test-only operation, "vscale" (y = scale * x over n elements), plugged in through the registry alone.

It is the acceptance test of the operation seam (tests/test_core_seam.py): a problem, a config, one
legality rule, a cost, a search space and a rendering template, with no line of GEMM code touched. It
imports only the core (cutegen.core), the field helpers and errors, and the shared rule type.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from cutegen._fields import as_choice, as_float, as_int, reject_unknown
from cutegen.core.op import Operation, Ranked  # noqa: F401  (Ranked: what core.search returns)
from cutegen.errors import FieldError
from cutegen.legality.rule import RuleSet

OP = "vscale"
BYTES = {"f16": 2, "bf16": 2, "f32": 4}
INT_MAX = 2**31 - 1
HBM_BYTES_PER_US = 3.35e6         # 3.35 TB/s
LAUNCH_US = 2.0


@dataclass(frozen=True)
class VectorScaleProblem:
    n: int
    dtype: str = "f16"
    scale: float = 1.0

    def __post_init__(self):
        as_int("n", self.n, lo=1, hi=INT_MAX)
        as_choice("dtype", self.dtype, BYTES)
        as_float("scale", self.scale)

    @property
    def name(self) -> str:
        return f"vscale_{self.dtype}_n{self.n}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": OP, "n": self.n, "dtype": self.dtype, "scale": self.scale}

    @classmethod
    def from_dict(cls, data: Any, where: str = "problem") -> "VectorScaleProblem":
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        data = {k: v for k, v in data.items() if k != "op"}
        reject_unknown(where, data, ("n", "dtype", "scale"))
        if "n" not in data:
            raise FieldError(f"{where}.n", "missing")
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None


@dataclass(frozen=True)
class ScaleConfig:
    block: int = 256            # threads per block
    vector: int = 1             # elements each thread loads at once

    def __post_init__(self):
        as_int("block", self.block, lo=32, hi=1024)
        if self.block % 32:
            raise FieldError("block", f"{self.block} is not a multiple of 32 (a warp)")
        if isinstance(self.vector, bool) or self.vector not in (1, 2, 4, 8):
            raise FieldError("vector", f"{self.vector!r} is not one of 1, 2, 4, 8")

    def to_dict(self) -> dict[str, Any]:
        return {"block": self.block, "vector": self.vector}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: Any, where: str = "config") -> "ScaleConfig":
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        reject_unknown(where, data, ("block", "vector"))
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None


# --- its rules --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScaleContext:
    problem: VectorScaleProblem
    config: ScaleConfig


VSCALE_RULES = RuleSet("vscale")


@VSCALE_RULES.rule("VSCALE-VECTOR-BYTES", summary="vector * sizeof(dtype) <= 16 (one 128-bit load per thread)",
                   source="PTX ISA: ld.global.v{2,4} moves at most 128 bits")
def _vector_bytes(ctx: ScaleContext) -> str | None:
    size = ctx.config.vector * BYTES[ctx.problem.dtype]
    return (f"vector {ctx.config.vector} x {BYTES[ctx.problem.dtype]} bytes ({ctx.problem.dtype}) = {size} "
            f"bytes > 16") if size > 16 else None


def check(problem: VectorScaleProblem, config: ScaleConfig) -> list:
    return VSCALE_RULES.evaluate(ScaleContext(problem, config))


# --- its space and cost -----------------------------------------------------------------------------
def space(problem: VectorScaleProblem):
    for block in (64, 128, 256, 512, 1024):
        for vector in (1, 2, 4, 8):
            yield ScaleConfig(block, vector)


def cost(problem: VectorScaleProblem, config: ScaleConfig) -> float:
    """Launch, plus the bytes read and written at HBM speed, slowed by narrow loads and by the last
    block's idle threads."""
    per_block = config.block * config.vector
    blocks = -(-problem.n // per_block)
    idle = blocks * per_block / problem.n
    stream = 2 * problem.n * BYTES[problem.dtype] / HBM_BYTES_PER_US
    return LAUNCH_US + stream * idle * (1 + 0.5 / config.vector)


# --- its rendering ----------------------------------------------------------------------------------
TEMPLATE = """// vscale: y = {{ scale }} * x, {{ n }} x {{ ctype }}; generated, do not edit
__global__ void __launch_bounds__({{ block }}) vscale({{ ctype }}* y, const {{ ctype }}* x, long n) {
  long i = ((long)blockIdx.x * {{ block }} + threadIdx.x) * {{ vector }};
  #pragma unroll
  for (int v = 0; v < {{ vector }}; ++v)
    if (i + v < n) y[i + v] = ({{ ctype }})({{ scale }}f * (float)x[i + v]);
}
"""
CTYPE = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}


@dataclass
class RenderedScale:
    files: dict[str, str] = field(default_factory=dict)

    def write(self, directory) -> None:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in sorted(self.files.items()):
            (out / name).write_text(text)


def render(problem: VectorScaleProblem, config: ScaleConfig, backend: str | None = None, **options) -> RenderedScale:
    broken = check(problem, config)
    if broken:
        raise FieldError("config", "; ".join(map(str, broken)))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    text = env.from_string(TEMPLATE).render(scale=problem.scale, n=problem.n, ctype=CTYPE[problem.dtype],
                                            block=config.block, vector=config.vector)
    manifest = json.dumps({"problem": problem.to_dict(), "config": config.to_dict(), "backend": backend},
                          sort_keys=True, indent=1) + "\n"
    return RenderedScale({"kernel.cu": text, "manifest.json": manifest})


def validation_cases(problem: VectorScaleProblem, config: ScaleConfig, shapes=(), **options) -> list[int]:
    """Sizes to run at: the problem's, one element past a whole block, and a single element."""
    per_block = config.block * config.vector
    return [problem.n, per_block + 1, 1, *shapes]


OPERATION = Operation(
    name=OP, problem_type=VectorScaleProblem, config_type=ScaleConfig, summary="y = scale * x",
    dtypes=lambda p: {"x": p.dtype, "y": p.dtype}, extents=lambda p: {"n": p.n}, flops=lambda p: p.n,
    db_columns=lambda p: {"kernel_class": f"vscale_{p.dtype}", "m": p.n, "n": 1, "k": 1, "batch": 1},
    features=lambda p: {"n": float(p.n), "bytes": float(BYTES[p.dtype])},
    rule_sets=lambda: [VSCALE_RULES], check=check, space=space, cost=cost,
    backends=("cuda",), render=render, validation_cases=validation_cases,
    tolerance=lambda p: 1e-3 if p.dtype == "f32" else 1e-2, reference="float32 scale * x",
    peers=("torch.mul",),
)
