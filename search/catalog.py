"""CUTLASS 4.2's own SM90 GEMM catalog, as (GemmProblem, KernelConfig) pairs.

Runs the generator's Python functions from the ``nvidia-cutlass`` wheel (``cutlass_library``):
``generate_*_math_instructions_sm90`` -> ``generate_tile_descriptions_sm90`` ->
``get_valid_schedules``, exactly as ``GenerateSM90_TensorOp_16b_WGMMA_gemm`` does, for one input
type, one A/B layout, and one instantiation level (``max`` = 9992 for ``--kernels all``).
Every emitted kernel is mapped to the ``KernelConfig`` it instantiates:

* ``KernelScheduleAuto`` -> Tile_M == 64 ? ping-pong : cooperative (TMA-aligned, CUDA >= 12.1,
  ``sm90_gmma_builder.inl``); ``EpilogueScheduleAuto`` -> ``NoSmemWarpSpecialized``
  (``epilogue/collective/builders/sm90_builder.inl``: "Pick No-Smem epilogue as the Auto Epilogue
  Schedule").
* FP8 fast-accumulation schedules map to their plain schedule (a numeric variant, not a config).
* Stage count 0 -> ``StageCountAutoCarveout`` -> ``"auto"``. Tile scheduler default -> persistent.
* C/D are column-major in every generator layout; the problem says so (``layout_c = "col"``).
"""
from __future__ import annotations

from dataclasses import dataclass

LEVEL_MAX = 9992


@dataclass(frozen=True)
class CatalogKernel:
    problem: object
    config: object
    name: str


def _lib():
    from cutlass_library import library, sm90_utils
    return library, sm90_utils


def _schedule_of(kernel_schedule, tile_m: int) -> str:
    library, _ = _lib()
    name = kernel_schedule.name
    if name == "ScheduleAuto":
        return "pingpong" if tile_m == 64 else "cooperative"
    if "Cooperative" in name:
        return "cooperative"
    if "Pingpong" in name:
        return "pingpong"
    if name.startswith("TmaWarpSpecialized"):
        return "warp_specialized"
    raise ValueError(f"kernel schedule {name} is not an SM90 TMA schedule cutegen models")


def _epilogue_of(epilogue_schedule) -> str:
    name = epilogue_schedule.name
    if name in ("ScheduleAuto", "NoSmemWarpSpecialized"):
        return "no_smem"
    if name == "TmaWarpSpecializedCooperative":
        return "tma_warp_specialized_cooperative"
    if name == "TmaWarpSpecialized":
        return "tma_warp_specialized"
    raise ValueError(f"epilogue schedule {name} is not modelled")


def catalog(dtype: str = "bf16", layout: str = "tn", dtype_d: str | None = None, *, m: int = 4096, n: int = 4096,
            k: int = 4096, level: int = LEVEL_MAX, cuda_version: str = "12.8.0") -> list[CatalogKernel]:
    """Every SM90 TMA GEMM kernel the generator emits for these types and layouts (aligned kernels)."""
    library, u = _lib()
    from cutegen.config import KernelConfig
    from cutegen.problem import BLAS_LAYOUTS, GemmProblem

    dt = {"bf16": library.DataType.bf16, "f16": library.DataType.f16, "e4m3": library.DataType.e4m3,
          "e5m2": library.DataType.e5m2}[dtype]
    if dtype in ("bf16", "f16"):
        insts = u.generate_fp16_bf16_math_instructions_sm90(level)
    else:
        insts = u.generate_fp8_math_instructions_sm90(level)
    insts = [mi for mi in insts if mi.element_a == dt and mi.element_b == dt
             and mi.element_accumulator == library.DataType.f32]
    la, lb = BLAS_LAYOUTS[layout]
    lt = {"row": library.LayoutType.RowMajor, "col": library.LayoutType.ColumnMajor}
    align = 128 // library.DataTypeSize[dt]
    gen_layout = [[lt[la], align], [lt[lb], align], [library.LayoutType.ColumnMajor, 1]]
    d_type = {"bf16": library.DataType.bf16, "f16": library.DataType.f16, "f32": library.DataType.f32}[
        dtype_d or ("bf16" if dtype in ("bf16", "e4m3", "e5m2") else dtype)]
    out: list[CatalogKernel] = []
    seen = set()
    for tile in sorted(u.generate_tile_descriptions_sm90(insts, is_aligned=True, level=level),
                       key=lambda t: (t.threadblock_shape, t.cluster_shape)):
        mi = tile.math_instruction
        for c_type in (d_type, library.DataType.void):
            types = u.generate_data_types_from_math_instruction(mi, element_source=c_type, element_dest=d_type)
            lay = u.fix_alignments(types, gen_layout, alignment_bits=128)
            scheds, sk = u.get_valid_schedules(tile_description=tile, cuda_version=cuda_version, is_aligned=True,
                                               data_types=types, instantiation_level=level, layout=lay)
            c_name = "void" if c_type == library.DataType.void else library.DataTypeNames[c_type]
            d_name = library.DataTypeNames[d_type]
            problem = GemmProblem(m=m, n=n, k=k, dtype_a=dtype, dtype_b=dtype, dtype_c=c_name, dtype_d=d_name,
                                  layout_a=la, layout_b=lb, layout_c="col")
            for (ks, es), scheduler in [(s, "persistent") for s in scheds] + [(s, "stream_k") for s in sk]:
                tm, tn, tk = tile.threadblock_shape
                cfg = KernelConfig(tile_shape=(tm, tn, tk), cluster_shape=tuple(tile.cluster_shape),
                                   mainloop_schedule=_schedule_of(ks, tm), epilogue_schedule=_epilogue_of(es),
                                   tile_scheduler=scheduler)
                name = (f"{tm}x{tn}x{tk}_{'x'.join(map(str, tile.cluster_shape))}_{ks.name}_{es.name}_"
                        f"{scheduler}_c{c_name}")
                if name in seen:     # the generator can stamp out duplicates (sm90_utils comment)
                    continue
                seen.add(name)
                out.append(CatalogKernel(problem, cfg, name))
    return out


def coverage(kernels: list[CatalogKernel]) -> dict:
    """Classify catalog kernels against the search: reachable (and legal), rejected by a rule, missing.

    Reachable kernels are also materialised as Kernel e-nodes of the root, to show the e-graph
    really holds them (the generator's Auto schedules name the same configuration as an explicit
    one, so distinct configurations are fewer than kernels); a kernel is "missing" if it is legal but no term of the e-graph reaches it.
    """
    from cutegen.search.engine import SearchSpace
    from cutegen.search.legality_analysis import Judge
    from cutegen.search import cost as costmod

    out = {"kernels": len(kernels), "reachable": 0, "rejected": 0, "missing": 0, "materialised": 0,
           "distinct_reachable_configs": 0,
           "rejected_by_rule": {}, "missing_names": []}
    by_problem: dict = {}
    for kern in kernels:
        by_problem.setdefault(kern.problem, []).append(kern)
    for problem, kerns in by_problem.items():
        space = SearchSpace(problem)
        judge = Judge(problem)
        rows = set()
        for kern in kerns:
            v = judge(kern.config)
            if not v.legal:
                out["rejected"] += 1
                for r in v.rules:
                    out["rejected_by_rule"][r] = out["rejected_by_rule"].get(r, 0) + 1
            elif space.reaches(kern.config):
                out["reachable"] += 1
                c = kern.config
                rows.add((*c.tile_shape, *c.cluster_shape[:2], *costmod.config_codes(c), 0, 1))
            else:
                out["missing"] += 1
                out["missing_names"].append(kern.name)
        out["distinct_reachable_configs"] += len(rows)
        space.egg.input("Expand", sorted(rows))
        space.egg.run("(run-schedule (saturate (run expand)))")
        impl = space.egg.freeze().functions.get("Impl")
        out["materialised"] += 0 if impl is None else len(impl.rows)
        space.egg.close()
    return out
