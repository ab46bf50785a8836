"""Attention backward (dQ, dK, dV): CUTLASS 4.2's Hopper FMHA backward (example 88), rendered with cutegen's C ABI.

The kernel family is the example's ``device::FmhaBwd`` spelled out (templates/attention/fmha_bwd_sm90.cu.j2): a
float32 ``sum_OdO`` pre-pass, a zeroed float32 dQ accumulator, the warp-specialized backward kernel
(``FmhaBwdMainloopTmaWarpSpecialized``: one producer warpgroup with a K/V load warp, a Q/dO/LSE/sum_OdO load warp
and a dQ reducer warp; two MMA warpgroups, each owning half of a CTA's KV block; dK and dV in registers, dQ through
TMA reduce-add) and a float32-to-16-bit conversion of dQ.

- ``AttentionBackwardConfig``: the tile, (tile_q, tile_kv) = the example's TileShape (BlockQO, BlockKV);
  ``EXAMPLE_CONFIGS`` lists the tiles the example instantiates per head dim (88_hopper_fmha.cu, run_bwd_<D>).
- The rules (stable IDs, predicates, reasons, sources) are ``legality/attention_backward.py``'s;
  ``backend_refusals`` is what the template itself cannot express.
- ``render(problem, config)``: kernel.cu and manifest.json, a pure function of the problem's kernel key and the
  config (the same writer as every kernel: ``cutegen.render.RenderedKernel``).

The problem is the forward's ``AttentionProblem`` (the backward of that forward); its ``scale`` and sizes are
run-time arguments. GQA/MQA: the kernel writes one dK/dV per query head, so the C ABI refuses heads_q != heads_kv
(ATTN-BWD-MHA) and the PyTorch op expands K and V to heads_q and sums dK and dV over each group
(``cutegen.ops.attention.torch_op``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

from ..._fields import as_int, reject_unknown
from ...core.op import CanonicalConfig
from ...errors import CutegenError, FieldError
from .problem import AttentionProblem

BACKEND = "cutlass"
TEMPLATE = "attention/fmha_bwd_sm90.cu.j2"
# cutegen's copy of the example's backward mainloop (bf16 needs one explicit conversion), inlined into every kernel.cu
COLLECTIVE_HEADER = "attention/backward/fmha_bwd_collective_sm90.hpp"
SOURCE_88 = "examples/88_hopper_fmha"
SMEM_LIMIT = 232448               # bytes: sm_90's opt-in shared memory per block (CUDA guide, compute capability 9.0)
ELEMENT = {"bf16": "cutlass::bfloat16_t", "f16": "cutlass::half_t"}
PASS = "backward"                 # in the config's JSON: a backward kernel never hashes like a forward one


@dataclass(frozen=True)
class AttentionBackwardConfig(CanonicalConfig):
    """The example's backward TileShape: ``tile_q`` (BlockQO: query rows per inner step) and ``tile_kv``
    (BlockKV: keys per CTA, split over the two MMA warpgroups). The example's only other choices are fixed by
    the collective (2 MMA warpgroups, 4 Q/dO stages, 2 K/V stages per warpgroup, no cluster, no persistence)."""
    tile_q: int = 64
    tile_kv: int = 128

    def __post_init__(self):
        for name in ("tile_q", "tile_kv"):
            value = as_int(name, getattr(self, name), lo=16, hi=256)
            if value % 16:
                raise FieldError(name, f"{value} is not a multiple of 16")
            object.__setattr__(self, name, value)

    def short_name(self) -> str:
        return f"bwd_{self.tile_q}x{self.tile_kv}"

    def to_dict(self) -> dict[str, Any]:
        return {"pass": PASS, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_dict(cls, data: Any, where: str = "config") -> "AttentionBackwardConfig":
        if not isinstance(data, dict):
            raise FieldError(where, f"expected an object, got {type(data).__name__}")
        data = dict(data)
        kind = data.pop("pass", PASS)
        if kind != PASS:
            raise FieldError(f"{where}.pass", f"{kind!r} is not {PASS!r}")
        reject_unknown(where, data, (f.name for f in fields(cls)))
        try:
            return cls(**data)
        except FieldError as e:
            raise FieldError(f"{where}.{e.field}", e.message) from None

    def replace(self, **changes) -> "AttentionBackwardConfig":
        return replace(self, **changes)


# The example's backward kernels (88_hopper_fmha.cu: run_bwd_32, run_bwd_64, run_bwd_128), first listed first.
EXAMPLE_CONFIGS: dict[int, tuple[AttentionBackwardConfig, ...]] = {
    32: (AttentionBackwardConfig(64, 128), AttentionBackwardConfig(128, 128)),
    64: (AttentionBackwardConfig(64, 128), AttentionBackwardConfig(128, 128)),
    128: (AttentionBackwardConfig(64, 128),),
}

# What the template cannot express (the hardware and the example's limits are rules: legality/attention_backward.py)
REFUSALS = {
    "ATTN-BWD-RENDER-VARLEN": ("variable-length batches have no backward kernel",
                               "templates/attention/fmha_bwd_sm90.cu.j2: one (seqlen_q, seqlen_kv) per launch; "
                               "the varlen loads of templates/attention/varlen/ are the forward's"),
    "ATTN-BWD-RENDER-V-LAYOUT": ("the backward reads V with its head dim contiguous",
                                 "88 fmha_collective_bwd_tma_warpspecialized.hpp: stride_V (int, int, int, _1)"),
}


def backend_refusals(problem: AttentionProblem, config: AttentionBackwardConfig, backend: str = BACKEND) -> list[str]:
    """What the backward template cannot build of (problem, config), ``"RULE-ID: reason (source)"`` each."""
    if backend != BACKEND:
        return [f"ATTN-RENDER-BACKEND: backend {backend!r} is not one of attention's ({BACKEND})"]
    out = []
    if problem.varlen:
        out.append(f"ATTN-BWD-RENDER-VARLEN: varlen true ({REFUSALS['ATTN-BWD-RENDER-VARLEN'][1]})")
    if problem.v_is_transposed:
        out.append(f"ATTN-BWD-RENDER-V-LAYOUT: v_transposed true ({REFUSALS['ATTN-BWD-RENDER-V-LAYOUT'][1]})")
    return out


def refusals(problem: AttentionProblem, config: AttentionBackwardConfig) -> list[str]:
    """Every reason (rules, then the template's) why (problem, config) is not rendered; empty: it is."""
    from ...legality.attention_backward import check_backward
    return [str(v) for v in check_backward(problem, config)] + backend_refusals(problem, config)


def backward_problem(problem: AttentionProblem) -> AttentionProblem:
    """The problem the backward kernel is rendered for: MHA (heads_kv = heads_q). The kernel writes one dK and dV per
    query head, so a GQA/MQA problem's backward is the same kernel (the op expands K, V and reduces dK, dV)."""
    return problem if problem.heads_kv == problem.heads_q else problem.replace(heads_kv=problem.heads_q)


def kernel_hash(problem: AttentionProblem, config: AttentionBackwardConfig) -> str:
    from ...manifest import kernel_hash as digest
    return digest(problem, config, BACKEND)


def _describe(problem: AttentionProblem, config: AttentionBackwardConfig, khash: str) -> str:
    from ... import __version__
    return json.dumps({"backend": BACKEND, "config": config.to_dict(), "cutegen": __version__, "hash": khash,
                       "pass": PASS, "problem": problem.kernel_key()}, sort_keys=True, separators=(",", ":"))


def _context(problem: AttentionProblem, config: AttentionBackwardConfig) -> dict[str, Any]:
    from ... import __version__
    from ...legality.attention_backward import shared_memory_bytes
    khash = kernel_hash(problem, config)
    c = config
    lines = [f"tile {c.tile_q} x {c.tile_kv} x {problem.head_dim} (Q rows per step x KV rows per CTA x head dim)",
             "2 MMA warpgroups of " + f"{c.tile_kv // 2} keys each; 1 producer warpgroup (K/V, Q/dO/LSE/sum_OdO, dQ reducer)",
             "stages: Q/dO/LSE/sum_OdO 4, K/V 2 per MMA warpgroup (fixed by the collective)",
             f"shared memory {shared_memory_bytes(problem, config)} bytes (model; the kernel's sizeof is asserted)",
             "float32: every GEMM accumulator, the softmax, sum_OdO and the dQ accumulator"]
    return {
        "version": __version__, "kernel_hash": khash, "problem_class": problem.kernel_class_name + "_bwd",
        "config_name": c.short_name(), "config_lines": lines, "element": ELEMENT.get(problem.dtype, "void"),
        "dtype": problem.dtype, "head_dim": problem.head_dim, "causal": problem.causal,
        "tile_q": c.tile_q, "tile_kv": c.tile_kv, "describe_json": _describe(problem, config, khash),
        "smem_limit": SMEM_LIMIT,
    }


def collective_header_text() -> str:
    """The backward mainloop header (templates/attention/backward/fmha_bwd_collective_sm90.hpp) as inlined."""
    from pathlib import Path
    import cutegen.templates as templates_pkg
    return (Path(templates_pkg.__file__).parent / COLLECTIVE_HEADER).read_text()


def render_source(problem: AttentionProblem, config: AttentionBackwardConfig) -> str:
    from ...core.templates import environment
    return environment().get_template(TEMPLATE).render(**_context(problem, config),
                                                       backward_collective=collective_header_text())


def render(problem: AttentionProblem, config: AttentionBackwardConfig, backend: str = BACKEND, *,
           toolchain: dict[str, Any] | None = None):
    """kernel.cu and manifest.json of the backward kernel for (problem, config), as a ``RenderedKernel``; a one-line
    CutegenError naming every rule and refusal it breaks."""
    if not isinstance(problem, AttentionProblem):
        raise FieldError("problem", f"expected an AttentionProblem, got {type(problem).__name__}")
    if not isinstance(config, AttentionBackwardConfig):
        raise FieldError("config", f"expected an AttentionBackwardConfig, got {type(config).__name__}")
    if backend != BACKEND:
        raise FieldError("backend", f"{backend!r} is not one of {BACKEND}")
    problem = backward_problem(problem)
    reasons = refusals(problem, config)
    if reasons:
        raise CutegenError("the attention backward renderer cannot build this configuration: " + "; ".join(reasons))
    from ... import manifest as manifest_mod
    source = render_source(problem, config)
    if toolchain is None:
        toolchain = {"cutlass": manifest_mod.cutlass_version(), "nvcc": manifest_mod.nvcc_version()}
    man = manifest_mod.build_manifest(problem=problem, config=config, backend=backend, source=source,
                                      legality={"checked_by": "legality/attention_backward.py", "legal": True},
                                      cost=None, toolchain=toolchain)
    man["op"] = "attention"
    man["pass"] = PASS
    man["abi"] = "cutegen_attention_backward"
    man["include_dirs"] = [SOURCE_88]
    from ...render import RenderedKernel
    return RenderedKernel(problem, config, backend, man["kernel_hash"],
                          {"kernel.cu": source, "manifest.json": manifest_mod.dumps(man)}, man)


def default_config(problem: AttentionProblem) -> AttentionBackwardConfig:
    """The first legal example tile for the problem's head dim; a one-line CutegenError when there is none."""
    for config in EXAMPLE_CONFIGS.get(problem.head_dim, ()):
        if not refusals(problem, config):
            return config
    probe = AttentionBackwardConfig()
    raise CutegenError("no backward kernel for this problem: " + "; ".join(refusals(problem, probe) or
                       [f"ATTN-BWD-TILE: no example tile for head_dim {problem.head_dim}"]))
