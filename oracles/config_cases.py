"""The configuration oracle's case list: CUTLASS 4.2 SM90 GEMMs placed on and next to rule boundaries.

Each case is one (problem, configuration) pair that ``config_probe.cu`` can express. Cases that
share everything but the problem size share one compiled kernel (``kernel_key``), so the GPU
machine compiles each kernel once and runs it once per problem.

Standard library only: this file runs on the GPU machine, where nothing of this repository is
installed. ``tests/test_config_oracle_data.py`` checks every case against ``cutegen``'s own schema.

    python3 oracles/config_cases.py list                 # one line per case
    python3 oracles/config_cases.py render BUILD_DIR [--groups g1,g2]
                                   # BUILD_DIR/<kernel>/probe.cu, cases.json, kernels.txt (only those groups)
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

# cutegen dtype name -> CUTLASS C++ element type (same spellings as cutegen/dtypes.py)
CUTLASS_TYPES = {
    "bf16": "cutlass::bfloat16_t",
    "f16": "cutlass::half_t",
    "tf32": "cutlass::tfloat32_t",
    "e4m3": "cutlass::float_e4m3_t",
    "e5m2": "cutlass::float_e5m2_t",
    "f32": "float",
    "void": "void",
}
LAYOUT_TAGS = {"row": "cutlass::layout::RowMajor", "col": "cutlass::layout::ColumnMajor"}
KERNEL_SCHEDULES = {
    "warp_specialized": "cutlass::gemm::KernelTmaWarpSpecialized",
    "cooperative": "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
    "pingpong": "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
}
EPILOGUE_SCHEDULES = {
    "tma_warp_specialized": "cutlass::epilogue::TmaWarpSpecialized",
    "tma_warp_specialized_cooperative": "cutlass::epilogue::TmaWarpSpecializedCooperative",
    "no_smem": "cutlass::epilogue::NoSmemWarpSpecialized",
}
TILE_SCHEDULERS = {
    "persistent": "cutlass::gemm::PersistentScheduler",
    "stream_k": "cutlass::gemm::StreamKScheduler",
}
BLAS = {"tn": ("row", "col"), "nt": ("col", "row"), "nn": ("col", "col"), "tt": ("row", "row")}
SHORT_SCHED = {"warp_specialized": "ws", "cooperative": "coop", "pingpong": "pp"}
SHORT_EPI = {"tma_warp_specialized": "tma", "tma_warp_specialized_cooperative": "tmacoop", "no_smem": "nosmem"}
# The epilogue a user pairs with each mainloop schedule (CUTLASS generator, rulebook E20).
MATCHING_EPILOGUE = {"warp_specialized": "tma_warp_specialized", "cooperative": "tma_warp_specialized_cooperative",
                     "pingpong": "tma_warp_specialized"}


@dataclass(frozen=True)
class Case:
    id: str
    group: str        # the rule boundary this case sits on
    why: str          # what it asks the compiler / GPU
    problem: dict     # GemmProblem fields (cutegen/problem.py)
    config: dict      # KernelConfig fields (cutegen/config.py)

    @property
    def kernel_key(self) -> str:
        """Everything the compiled binary depends on: the problem minus its sizes, plus the config."""
        p, c = self.problem, self.config
        dt = p["dtype_a"] if p["dtype_a"] == p["dtype_b"] else p["dtype_a"] + p["dtype_b"]
        lay = ("t" if p["layout_a"] == "row" else "n") + ("n" if p["layout_b"] == "col" else "t")
        t, cl = c["tile_shape"], c["cluster_shape"]
        st = "sauto" if c["stages"] == "auto" else f"s{c['stages']}"
        parts = [f"{dt}{lay}", f"c{p['dtype_c']}d{p['dtype_d']}" + ("col" if p["layout_c"] == "col" else ""),
                 f"{t[0]}x{t[1]}x{t[2]}", f"c{cl[0]}x{cl[1]}", st, SHORT_SCHED[c["mainloop_schedule"]],
                 SHORT_EPI[c["epilogue_schedule"]], "sk" if c["tile_scheduler"] == "stream_k" else "pers"]
        return "-".join(parts)

    @property
    def problem_tag(self) -> str:
        p = self.problem
        tag = f"m{p['m']}n{p['n']}k{p['k']}"
        return tag + (f"b{p['batch']}" if p["batch"] != 1 else "")

    def macros(self) -> list[tuple[str, str]]:
        p, c = self.problem, self.config
        t, cl = c["tile_shape"], c["cluster_shape"]
        return [
            ("PROBE_CASE_ID", json.dumps(self.kernel_key)),
            ("PROBE_ELEMENT_A", CUTLASS_TYPES[p["dtype_a"]]),
            ("PROBE_ELEMENT_B", CUTLASS_TYPES[p["dtype_b"]]),
            ("PROBE_ELEMENT_C", CUTLASS_TYPES[p["dtype_c"]]),
            ("PROBE_ELEMENT_D", CUTLASS_TYPES[p["dtype_d"]]),
            ("PROBE_LAYOUT_A", LAYOUT_TAGS[p["layout_a"]]),
            ("PROBE_LAYOUT_B", LAYOUT_TAGS[p["layout_b"]]),
            ("PROBE_LAYOUT_C", LAYOUT_TAGS[p["layout_c"]]),
            ("PROBE_TILE_M", str(t[0])),
            ("PROBE_TILE_N", str(t[1])),
            ("PROBE_TILE_K", str(t[2])),
            ("PROBE_CLUSTER_M", str(cl[0])),
            ("PROBE_CLUSTER_N", str(cl[1])),
            ("PROBE_STAGES", "0" if c["stages"] == "auto" else str(c["stages"])),
            ("PROBE_KERNEL_SCHEDULE", KERNEL_SCHEDULES[c["mainloop_schedule"]]),
            ("PROBE_EPILOGUE_SCHEDULE", EPILOGUE_SCHEDULES[c["epilogue_schedule"]]),
            ("PROBE_TILE_SCHEDULER", TILE_SCHEDULERS[c["tile_scheduler"]]),
        ]

    def to_dict(self) -> dict:
        return {"id": self.id, "group": self.group, "why": self.why, "kernel": self.kernel_key,
                "problem": self.problem, "config": self.config}


def _case(group: str, why: str, tile, *, cluster=(1, 1), stages="auto", sched="cooperative", epi=None,
          sk=False, layout="tn", dtype="bf16", dtype_b=None, c=None, d=None, layout_c="row",
          mnk=(2048, 2048, 2048), batch=1) -> Case:
    dtype_b = dtype_b or dtype
    default_out = "f32" if dtype == "tf32" else "bf16"
    d = d or default_out
    c = c or d
    la, lb = BLAS[layout]
    problem = {"m": mnk[0], "n": mnk[1], "k": mnk[2], "batch": batch, "dtype_a": dtype, "dtype_b": dtype_b,
               "dtype_c": c, "dtype_d": d, "dtype_acc": "f32", "layout_a": la, "layout_b": lb,
               "layout_c": layout_c}
    config = {"tile_shape": list(tile), "cluster_shape": [cluster[0], cluster[1], 1], "stages": stages,
              "mainloop_schedule": sched, "epilogue_schedule": epi or MATCHING_EPILOGUE[sched],
              "tile_scheduler": "stream_k" if sk else "persistent"}
    tmp = Case("", group, why, problem, config)
    return Case(f"{group}-{tmp.kernel_key}-{tmp.problem_tag}", group, why, problem, config)


def cases() -> list[Case]:
    """Every case, in a fixed order. Adding a case never renames another."""
    out: list[Case] = []
    add = out.append

    # --- E09: cooperative needs Tile_M >= 128; what does Tile_M = 192 do?  (+ pingpong / WS at 64, 192)
    notes = {64: " (below the E09 bound of 128)", 192: " (>= 128 but not a multiple of 128)"}
    for m in (64, 128, 192, 256):
        add(_case("coop_tile_m", f"cooperative Tile_M={m}{notes.get(m, '')}", (m, 128, 64)))
    add(_case("coop_tile_m", "pingpong Tile_M=64: one warpgroup per tile, legal at 64", (64, 128, 64), sched="pingpong"))
    add(_case("coop_tile_m", "pingpong Tile_M=192", (192, 128, 64), sched="pingpong"))
    add(_case("coop_tile_m", "warp-specialized Tile_M=64", (64, 128, 64), sched="warp_specialized"))

    # --- E10/E11/E13: stream-K only with cooperative
    add(_case("stream_k", "stream-K cooperative (legal pairing)", (128, 128, 64), sk=True))
    add(_case("stream_k", "stream-K cooperative with no-smem epilogue", (128, 128, 64), sk=True, epi="no_smem"))
    add(_case("stream_k", "stream-K with ping-pong (E10 static_assert)", (128, 128, 64), sk=True, sched="pingpong"))
    add(_case("stream_k", "stream-K with plain warp-specialized (E11 static_assert)", (128, 128, 64), sk=True,
              sched="warp_specialized"))
    add(_case("stream_k", "stream-K with a 2x1 cluster", (128, 128, 64), sk=True, cluster=(2, 1)))
    add(_case("stream_k", "stream-K, few tiles and long K: the K dimension is actually split", (128, 128, 64),
              sk=True, mnk=(512, 512, 16384)))
    add(_case("stream_k", "stream-K, ragged problem", (128, 128, 64), sk=True, mnk=(2000, 2056, 1000)))

    # --- rulebook H: the reported stream-K hang (128x96x128, 3 stages) and its neighbours
    for cl in ((2, 2), (1, 1)):
        for size in (2048, 4096):
            add(_case("streamk_hang", f"reported hang: stream-K 128x96x128 s3 cluster {cl[0]}x{cl[1]} at {size}^3",
                      (128, 96, 128), stages=3, sk=True, cluster=cl, mnk=(size, size, size)))
    add(_case("streamk_hang", "same tile/stages/cluster 2x2 with the persistent scheduler at 4096^3",
              (128, 96, 128), stages=3, cluster=(2, 2), mnk=(4096, 4096, 4096)))
    add(_case("streamk_hang", "stream-K 128x128x128 s3 at 4096^3 (Tile_N 128 instead of 96)", (128, 128, 128),
              stages=3, sk=True, mnk=(4096, 4096, 4096)))

    # --- D06/D07/D08, A27, E14: cluster shapes
    for cl in ((2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (4, 2), (8, 1), (1, 8), (4, 4),
               (8, 4), (3, 1)):
        note = {16: "16 CTAs: non-portable", 32: "32 CTAs: over the hardware limit"}.get(cl[0] * cl[1], "")
        if cl[0] == 3 or cl[1] == 3:
            note = "3 does not divide the 128-wide tile (multicast box split, A27)"
        add(_case("cluster", f"cooperative 128x128x64 cluster {cl[0]}x{cl[1]} {note}".strip(), (128, 128, 64),
                  cluster=cl))
    add(_case("cluster", "cluster 4x1 on a problem whose tile grid (16x17) it does not divide", (128, 128, 64),
              cluster=(4, 1), mnk=(2000, 2056, 1000)))
    add(_case("cluster", "pingpong 64x128x64 with cluster 1x8 (A multicast over 8)", (64, 128, 64),
              sched="pingpong", cluster=(1, 8)))

    # --- E06/E07/D02: explicit stage counts around the 227 KiB limit, and auto
    for s in (1, 5, 6, 7):
        add(_case("stages", f"cooperative 128x128x64 with TMA epilogue, {s} stages (32,784 B per stage)",
                  (128, 128, 64), stages=s))
    for s in (7, 8):
        add(_case("stages", f"cooperative 128x128x64 with no-smem epilogue, {s} stages", (128, 128, 64), stages=s,
                  epi="no_smem"))
    for s in (4, 5):
        add(_case("stages", f"cooperative 128x256x64, {s} stages (49,168 B per stage)", (128, 256, 64), stages=s))
    for s in (8, 9):
        add(_case("stages", f"pingpong 64x128x64, {s} stages (24,592 B per stage)", (64, 128, 64), stages=s,
                  sched="pingpong"))
    add(_case("stages", "pingpong 64x128x64 auto stages", (64, 128, 64), sched="pingpong"))
    for s in (3, 4):
        add(_case("stages", f"cooperative 128x128x128, {s} stages (65,552 B per stage)", (128, 128, 128), stages=s))

    # --- B04/B20/E03/E19: Tile_N values
    for n in (8, 24, 96, 200, 208, 256, 264, 4):
        add(_case("tile_n", f"cooperative 128x{n}x64", (128, n, 64)))
    add(_case("tile_n", "pingpong 64x200x64", (64, 200, 64), sched="pingpong"))
    add(_case("tile_n", "pingpong 64x24x64", (64, 24, 64), sched="pingpong"))

    # --- E03/E04/E07: Tile_K values
    for k in (8, 16, 32, 128, 256):
        add(_case("tile_k", f"cooperative 128x128x{k}", (128, 128, k)))

    # --- E20: mainloop / epilogue schedule pairs
    for sched in ("cooperative", "pingpong", "warp_specialized"):
        for epi in ("tma_warp_specialized", "tma_warp_specialized_cooperative", "no_smem"):
            if (sched, epi) == ("cooperative", "tma_warp_specialized_cooperative"):
                continue  # the base case, already in coop_tile_m
            add(_case("epilogue_pair", f"{sched} mainloop with {epi} epilogue", (128, 128, 64), sched=sched, epi=epi))

    # --- B07/E04/E05: the four BLAS layouts, MN-major atoms on odd tiles, column-major C/D
    for lay in ("nt", "nn", "tt"):
        add(_case("layout", f"bf16 {lay.upper()} cooperative 128x128x64", (128, 128, 64), layout=lay))
    add(_case("layout", "bf16 NT pingpong 64x128x64", (64, 128, 64), layout="nt", sched="pingpong"))
    add(_case("layout", "NT with Tile_N 24: MN-major B needs the 8-wide INTER atom", (128, 24, 64), layout="nt"))
    add(_case("layout", "NT with Tile_N 200: MN-major B, 200 = 25 x 8", (128, 200, 64), layout="nt"))
    add(_case("layout", "NN with Tile_M 64 pingpong: MN-major A with a 64-wide SW128 atom", (64, 64, 64),
              layout="nn", sched="pingpong"))
    add(_case("layout", "column-major C/D", (128, 128, 64), layout_c="col"))
    add(_case("layout", "column-major C/D, N not a multiple of 8 (only M is contiguous)", (128, 128, 64),
              layout_c="col", mnk=(2048, 2050, 2048)))

    # --- B04/B05/B07/E05: other input types
    add(_case("dtype", "f16 TN cooperative", (128, 128, 64), dtype="f16", d="f16"))
    add(_case("dtype", "f16 NT pingpong", (64, 128, 64), dtype="f16", d="f16", layout="nt", sched="pingpong"))
    add(_case("dtype", "bf16 in, f32 C/D, 128x256 (large TMA epilogue)", (128, 256, 64), d="f32"))
    add(_case("dtype", "e4m3 TN cooperative 128x128x128", (128, 128, 128), dtype="e4m3"))
    add(_case("dtype", "e4m3 TN cooperative Tile_K 32 (below one SW64 atom)", (128, 128, 32), dtype="e4m3"))
    add(_case("dtype", "e4m3 NT (non-TN fp8: no transpose in WGMMA, B07/E05)", (128, 128, 128), dtype="e4m3",
              layout="nt"))
    add(_case("dtype", "e5m2 TN cooperative", (128, 128, 128), dtype="e5m2"))
    add(_case("dtype", "e4m3 x e5m2 TN (mixed fp8)", (128, 128, 128), dtype="e4m3", dtype_b="e5m2"))
    add(_case("dtype", "tf32 TN cooperative 128x128x32", (128, 128, 32), dtype="tf32"))
    add(_case("dtype", "tf32 TN cooperative 128x128x64", (128, 128, 64), dtype="tf32"))
    add(_case("dtype", "tf32 NT Tile_K 32 (transposed in smem; B K extent = 128 bytes)", (128, 128, 32),
              dtype="tf32", layout="nt"))
    add(_case("dtype", "tf32 NT Tile_K 64 (B K extent 256 bytes)", (128, 128, 64), dtype="tf32", layout="nt"))
    add(_case("dtype", "void C, cooperative TMA epilogue", (128, 128, 64), c="void"))
    add(_case("dtype", "void C, no-smem epilogue", (128, 128, 64), c="void", epi="no_smem"))
    add(_case("dtype", "void C, pingpong", (64, 128, 64), c="void", sched="pingpong"))

    # --- B10/E21: accumulators of 256 registers per thread
    add(_case("accumulator", "pingpong 128x256x64: 256 f32 accumulator registers per thread", (128, 256, 64),
              sched="pingpong"))
    add(_case("accumulator", "cooperative 256x256x64: 256 registers per thread", (256, 256, 64)))
    add(_case("accumulator", "warp-specialized 128x256x64", (128, 256, 64), sched="warp_specialized"))
    add(_case("accumulator", "pingpong 256x128x64", (256, 128, 64), sched="pingpong"))

    # --- E15/E16/E17: problem sizes (can_implement) on the base kernel and neighbours
    base = dict(tile=(128, 128, 64))
    add(_case("problem", "base kernel at 4096^3", base["tile"], mnk=(4096, 4096, 4096)))
    add(_case("problem", "ragged 2000x2056x1000, every contiguous extent a multiple of 8", base["tile"],
              mnk=(2000, 2056, 1000)))
    add(_case("problem", "TN with M=2001: M is not contiguous in A, C or D", base["tile"], mnk=(2001, 2056, 1000)))
    add(_case("problem", "TN with K=1002: K is contiguous in A and B (E15)", base["tile"], mnk=(2048, 2048, 1002)))
    add(_case("problem", "row-major D with N=2050 (E16)", base["tile"], mnk=(2048, 2050, 2048)))
    add(_case("problem", "NT with M=2001: M is contiguous in A (E15)", base["tile"], layout="nt",
              mnk=(2001, 2048, 2048)))
    add(_case("problem", "batched: L=3", base["tile"], mnk=(1024, 1024, 1024), batch=3))
    add(_case("problem", "problem smaller than one tile", (64, 128, 64), sched="pingpong", mnk=(40, 56, 64)))
    add(_case("problem", "K smaller than one k-tile", base["tile"], mnk=(2048, 2048, 24)))
    add(_case("problem", "pingpong ragged 2000x2056x1000", (64, 128, 64), sched="pingpong", mnk=(2000, 2056, 1000)))

    ids = [c.id for c in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate case ids: {sorted(dup)}")
    return out


def compile_weight(kernel_cases: list[Case]) -> tuple:
    """Rough compile cost, to start the longest compiles first: bigger tiles unroll more WGMMAs."""
    c = kernel_cases[0].config
    t = c["tile_shape"]
    return (t[0] * t[1] * (2 if c["tile_scheduler"] == "stream_k" else 1), t[2])


def kernels(case_list: list[Case] | None = None) -> dict[str, list[Case]]:
    """kernel_key -> its cases, longest compile first."""
    groups: dict[str, list[Case]] = {}
    for c in case_list if case_list is not None else cases():
        groups.setdefault(c.kernel_key, []).append(c)
    return dict(sorted(groups.items(), key=lambda kv: (tuple(-x for x in compile_weight(kv[1])), kv[0])))


def wrapper_source(case: Case) -> str:
    lines = [f"// Generated by oracles/config_cases.py for kernel {case.kernel_key}. Do not edit.",
             f"// {case.why}"]
    lines += [f"#define {k} {v}" for k, v in case.macros()]
    lines.append('#include "config_probe.cu"')
    return "\n".join(lines) + "\n"


def render(build_dir: str, only_groups: list[str] | None = None) -> int:
    """Write BUILD/<kernel>/probe.cu for every kernel, BUILD/kernels.txt (compile order) and BUILD/cases.json.

    ``only_groups`` restricts the sweep to those case groups (e.g. re-run ``streamk_hang`` on another chip).
    """
    selected = cases()
    if only_groups:
        unknown = sorted(set(only_groups) - {c.group for c in selected})
        if unknown:
            raise ValueError(f"unknown case group(s): {', '.join(unknown)}")
        selected = [c for c in selected if c.group in only_groups]
    groups = kernels(selected)
    os.makedirs(build_dir, exist_ok=True)
    for key, kcases in groups.items():
        d = os.path.join(build_dir, key)
        os.makedirs(d, exist_ok=True)
        src = wrapper_source(kcases[0])
        path = os.path.join(d, "probe.cu")
        if not os.path.exists(path) or open(path).read() != src:
            with open(path, "w") as f:
                f.write(src)
    with open(os.path.join(build_dir, "kernels.txt"), "w") as f:
        f.write("".join(k + "\n" for k in groups))
    with open(os.path.join(build_dir, "cases.json"), "w") as f:
        json.dump([c.to_dict() for c in selected], f, indent=1, sort_keys=True)
        f.write("\n")
    # kernel -> "id M N K L" lines, read by the runner to run each problem of a compiled kernel
    for key, kcases in groups.items():
        with open(os.path.join(build_dir, key, "runs.txt"), "w") as f:
            for c in kcases:
                p = c.problem
                f.write(f"{c.id} {p['m']} {p['n']} {p['k']} {p['batch']}\n")
    return len(groups)


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "list":
        for c in cases():
            print(f"{c.id}\t{c.why}")
        return 0
    if len(argv) in (2, 4) and argv[0] == "render" and (len(argv) == 2 or argv[2] == "--groups"):
        only = argv[3].split(",") if len(argv) == 4 and argv[3] else None
        try:
            n = render(argv[1], only)
        except ValueError as e:
            print(f"config_cases: {e}", file=sys.stderr)
            return 2
        print(f"rendered {n} kernels into {argv[1]}" + (f" (groups {argv[3]})" if only else ""))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
