"""cutegen pack on the CPU: shapes files, sampling, selection, dispatch tables, rendering, --check."""
from __future__ import annotations

import ast
import json
from types import SimpleNamespace

import pytest

from cutegen import packs
from cutegen.cli import main
from cutegen.errors import CutegenError, FieldError
from cutegen.packs import dispatch, select, shapes, targets

TINY = """
[[shape]]
name = "proj"
dtype = "bf16"
layout = "tn"
m = [1, 16, 128]
n = 4096
k = 4096
"""


def _write(tmp_path, text, name="shapes.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# --- shapes file -----------------------------------------------------------------------------------
def test_range_is_sampled_at_powers_of_two_ends_and_wave_boundaries(tmp_path):
    f = _write(tmp_path, '[[shape]]\nm = {min = 3, max = 5000}\nn = 4096\nk = 1024\n')
    pts = shapes.expand(shapes.load(f), sms=132)
    ms = [s.problem.m for s in pts]
    assert ms == sorted(set(ms))
    assert {3, 5000, 4, 8, 4096} <= set(ms) and 2 not in ms and 8192 not in ms
    # 128x128 tiles: 32 tile columns, so 4 tile rows fill one wave of 132 SMs: M = 512 and 513
    assert {512, 513} <= set(ms)
    assert sum(s.weight for s in pts) == pytest.approx(1.0)
    # on a 114-SM part the boundaries move (3 tile rows: 384 and 385)
    ms114 = {s.problem.m for s in shapes.expand(shapes.load(f), sms=114)}
    assert {384, 385} <= ms114 and 513 not in ms114


@pytest.mark.parametrize("body, field", [
    ('m = 0\nn = 8\nk = 8', "shape[0].m"),
    ('m = {min = 9, max = 3}\nn = 8\nk = 8', "shape[0].m"),
    ('m = {lo = 1}\nn = 8\nk = 8', "shape[0].m"),
    ('m = 1\nk = 8', "shape[0].n"),
    ('m = 1\nn = 8\nk = 8\nweight = -1', "shape[0].weight"),
    ('m = 1\nn = 8\nk = 8\ndtype = "bf17"', "shape[0].dtype_a"),
    ('m = 1\nn = 8\nk = 8\nbogus = 1', "shape[0]"),
])
def test_bad_shapes_name_the_field(tmp_path, body, field):
    f = _write(tmp_path, "[[shape]]\n" + body + "\n")
    with pytest.raises(FieldError) as e:
        shapes.load(f)
    assert field in e.value.field


def test_duplicate_names_and_missing_file(tmp_path):
    f = _write(tmp_path, '[[shape]]\nname="a"\nm=1\nn=8\nk=8\n[[shape]]\nname="a"\nm=2\nn=8\nk=8\n')
    with pytest.raises(FieldError, match="used by an earlier shape"):
        shapes.load(f)
    with pytest.raises(CutegenError, match="no such shapes file"):
        shapes.load(tmp_path / "nope.toml")


# --- targets ---------------------------------------------------------------------------------------
def test_targets_are_the_results_database_kinds_priced_as_search_device():
    pcie = targets.target("h100-pcie")
    assert pcie.sms == 114 and pcie.rates is not None and pcie.rates.sms == 114
    assert targets.target("h100-sxm").rates is None          # the model as calibrated
    with pytest.raises(FieldError, match="--target"):
        targets.target("a100")


def test_a_target_with_fewer_sms_prices_the_same_kernel_slower(tmp_path):
    pts = shapes.expand(shapes.load(_write(tmp_path, TINY)), 132)
    sxm = select.select(pts, targets.target("h100-sxm"), max_kernels=1, tolerance=0.03)
    k = sxm.kernels[0].config
    p = pts[-1].problem                                        # M = 128: more tiles than one wave of 114?
    t_sxm = select.predicted_time(p, k, targets.target("h100-sxm").rates)
    t_pcie = select.predicted_time(p, k, targets.target("h100-pcie").rates)
    assert t_pcie > t_sxm


# --- selection -------------------------------------------------------------------------------------
def test_tolerance_zero_and_enough_kernels_gives_every_shape_its_best(tmp_path):
    pts = shapes.expand(shapes.load(_write(tmp_path, TINY)), 132)
    sel = select.select(pts, targets.target("h100-sxm"), max_kernels=16, tolerance=0.0)
    assert all(r.loss == pytest.approx(0.0) for r in sel.rows)
    assert 1 < len(sel.kernels) <= 3


def test_one_kernel_follows_the_weight(tmp_path):
    t = targets.target("h100-sxm")
    light = TINY + "weight = 1\n"
    pts = shapes.expand(shapes.load(_write(tmp_path, light)), 132)
    heavy = [shapes.Shape(s.entry, s.problem, 100.0 if s.problem.m == 128 else 1.0) for s in pts]
    sel_heavy = select.select(heavy, t, max_kernels=1, tolerance=0.03)
    by_m = {r.shape.problem.m: r for r in sel_heavy.rows}
    assert by_m[128].loss <= 0.03          # the heavy shape is served within tolerance
    sel_light = select.select(pts, t, max_kernels=1, tolerance=0.03)
    by_m_light = {r.shape.problem.m: r for r in sel_light.rows}
    assert by_m_light[128].loss > 0.03     # with equal weights the two small shapes win
    assert any("not within" in n for n in sel_light.notes)


def test_too_few_kernels_for_the_classes(tmp_path):
    two = TINY + '[[shape]]\nname="f16"\ndtype="f16"\nlayout="tn"\nm=64\nn=4096\nk=4096\n'
    pts = shapes.expand(shapes.load(_write(tmp_path, two)), 132)
    with pytest.raises(FieldError, match="kernel classes"):
        select.select(pts, targets.target("h100-sxm"), max_kernels=1, tolerance=0.03)


# --- dispatch tables -------------------------------------------------------------------------------
def test_hash_table_finds_every_key_within_its_longest_probe():
    items = [((0, m, 4096, 4096, 1), {"M": m}) for m in range(1, 200)]
    table, longest = dispatch.hash_table(items, {"M": 0})
    size = len(table)
    assert size & (size - 1) == 0 and size >= 2 * len(items)
    for key, value in items:
        h = dispatch.slot(*key)
        assert any(table[(h + i) & (size - 1)] is value for i in range(longest + 1))
    assert dispatch.slot(0, 1, 2, 3, 4) != dispatch.slot(0, 2, 1, 3, 4)


def test_bucket_points_stay_in_the_bucket():
    for b in range(dispatch.BUCKETS):
        pts = dispatch.bucket_points(b)
        assert all(p.bit_length() - 1 == b for p in pts)


# --- the whole pack --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_pack(tmp_path_factory):
    d = tmp_path_factory.mktemp("pack")
    f = _write(d, TINY)
    return f, packs.make_pack(f, "h100-sxm", max_kernels=1, tolerance=0.03)


def test_pack_files_are_deterministic_and_complete(tiny_pack):
    f, files = tiny_pack
    again = packs.make_pack(f, "h100-sxm", max_kernels=1, tolerance=0.03)
    assert again == files
    kernel_dirs = {p.split("/")[1] for p in files if p.startswith("kernels/")}
    assert len(kernel_dirs) == 2                 # the chosen kernel and the class's unaligned fallback
    for need in ("CMakeLists.txt", "include/cutegen_pack.h", "src/dispatch.cpp", "cmake/cutegen_packConfig.cmake.in",
                 "torch/cutegen_pack_torch.cpp", "torch/cutegen_pack_torch.py", "COVERAGE.md", "pack.json"):
        assert need in files
    meta = json.loads(files["pack.json"])
    assert meta["coverage"]["shapes"] == 3 and len(meta["kernels"]) == 2
    # the fallback: the smallest alignment the search accepts (1 element, a cp.async mainloop; issue 10)
    fb = meta["kernels"][1]
    assert meta["classes"][0]["fallback"] == fb["name"] and fb["name"].endswith("_fallback")
    assert fb["problem"]["alignment_a"] == fb["problem"]["alignment_b"] == fb["problem"]["alignment_c"] == 1
    # the kernel's own bytes are those cutegen renders for it (its C ABI unchanged)
    plan = next(t for p, t in files.items() if p.endswith("plan.cu"))
    assert '#include "kernel.cu"' in plan and "#define cutegen_gemm cutegen_" in plan
    assert "plan_run" in plan and "cudaFuncSetAttribute" in plan


def test_dispatch_source_holds_the_selection(tiny_pack):
    _, files = tiny_pack
    src = files["src/dispatch.cpp"]
    for m in (1, 16, 128):
        assert f"{{{m}, 4096, 4096, 1, 0, 0, \"exact shape proj m{m}n4096k4096" in src
    assert "kNKBuckets[1][kBuckets]" in src


def test_torch_extension_rendering(tiny_pack):
    _, files = tiny_pack
    cpp = files["torch/cutegen_pack_torch.cpp"]
    assert 'm.def("gemm(Tensor a, Tensor b, Tensor? bias=None) -> Tensor")' in cpp
    assert "TORCH_LIBRARY_IMPL(cutegen, CUDA, m)" in cpp and "getCurrentCUDAStream" in cpp
    py = files["torch/cutegen_pack_torch.py"]
    ast.parse(py)
    assert 'register_fake("cutegen::gemm")' in py and "torch.bfloat16: torch.bfloat16" in py


def test_cli_writes_then_check_catches_drift(tmp_path, capsys):
    f = _write(tmp_path, TINY)
    out = tmp_path / "out"
    base = ["pack", f, "-o", str(out), "--max-kernels", "1"]
    assert main(base + ["--target", "h100-sxm", "--target", "h200"]) == 0
    assert (out / "h100-sxm" / "pack.json").is_file() and (out / "h200" / "pack.json").is_file()
    h200 = json.loads((out / "h200" / "pack.json").read_text())
    assert h200["target"]["kind"] == "h200" and h200["target"]["hbm_bytes_per_s"] == 4.8e12
    (out / "h200" / "COVERAGE.md").write_text("edited\n")
    (out / "h100-sxm" / "kernels" / "stale.txt").write_text("x")
    (out / "h100-sxm" / "build").mkdir()
    (out / "h100-sxm" / "build" / "user.o").write_text("not ours")
    capsys.readouterr()
    assert main(base + ["--target", "h100-sxm", "--target", "h200", "--check"]) == 1
    said = capsys.readouterr().out
    assert "h200/COVERAGE.md" in said and "kernels/stale.txt" in said and "user.o" not in said
    assert "pack.json" not in said                 # only what changed is named
    assert main(base) == 0                         # default target h100-sxm: rewrites, removes the stale file
    assert not (out / "h100-sxm" / "kernels" / "stale.txt").exists()
    assert (out / "h100-sxm" / "build" / "user.o").exists()
    assert main(base + ["--check"]) == 0


def test_cli_refuses_bad_options(tmp_path, capsys):
    f = _write(tmp_path, TINY)
    assert main(["pack", f, "-o", str(tmp_path / "o"), "--max-kernels", "0"]) != 0
    assert "--max-kernels" in capsys.readouterr().err
    assert main(["pack", f, "-o", str(tmp_path / "o"), "--name", "has space"]) != 0
    assert "--name" in capsys.readouterr().err


def test_results_database_drives_the_selection_where_it_has_data(tmp_path):
    """The real database (issue 11) with its committed seed: 1024^3 bf16 TN was measured on an H200. Its
    measured medians price those kernels; the other candidates get the learned or the prior time."""
    import statistics
    from cutegen.results import ResultsDB
    db = ResultsDB(str(tmp_path / "results.sqlite"))
    f = _write(tmp_path, '[[shape]]\ndtype="bf16"\nlayout="tn"\nm=1024\nn=1024\nk=1024\n')
    pts = shapes.expand(shapes.load(f), 132)
    measured = [m for m in db.measurements(device_kind="h200", problem=pts[0].problem)
                if m.validated and m.backend == "cutlass" and m.is_benchmark]
    assert measured, "the seed database should hold H200 measurements of this problem"
    sel = select.select(pts, targets.target("h200"), max_kernels=4, tolerance=0.0, db=db)
    row = sel.times[0]
    sources = {src for _, src in row.values()}
    assert "measured" in sources and sources <= {"measured", "learned", "prior"}
    for key, (t, src) in row.items():
        if src == "measured":
            times = [m.median_us for m in measured if m.config.to_json() == key]
            assert times and min(times) <= t <= max(times)
    assert sel.rows[0].source in ("measured", "learned", "prior")
    # without the database every time is the prior's prediction
    plain = select.select(pts, targets.target("h200"), max_kernels=4, tolerance=0.0)
    assert {src for _, src in plain.times[0].values()} == {"predicted"}


def test_committed_llm_packs_match_their_manifests_and_dispatch():
    """bench/packs/llm (examples/pack/llm.toml): each kernel re-renders byte for byte from its manifest
    (the full `cutegen pack --check` searches 165 shapes per target, minutes here), and the dispatch table
    holds every shape of the coverage table with the kernel it names."""
    from pathlib import Path
    from cutegen.render import render_manifest
    root = Path(__file__).resolve().parent.parent / "bench" / "packs" / "llm"
    kinds = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert kinds == ["h100-sxm", "h200"]
    for kind in kinds:
        meta = json.loads((root / kind / "pack.json").read_text())
        assert meta["target"]["kind"] == kind and len(meta["kernels"]) <= 16 + 1   # + the unaligned fallback
        for k in meta["kernels"]:
            d = root / kind / "kernels" / k["dir"]
            rk = render_manifest(d / "manifest.json")
            assert rk.kernel_hash == k["hash"] and not rk.differences(d), d
        src = (root / kind / "src" / "dispatch.cpp").read_text()
        names = [k["name"] for k in meta["kernels"]]
        for r in meta["coverage"]["rows"]:
            j = names.index(r["kernel"])
            assert f"{{{r['m']}, {r['n']}, {r['k']}, 1, 0, {j}, \"exact shape {r['shape']} " in src


def test_epilogue_classes_render_their_plan_entry_points(tmp_path):
    """A bias + ReLU class and a void-C class: the plan sets the bias pointer, and never a C pointer
    for void C; the header lists both classes and the torch op maps dtypes through them."""
    f = _write(tmp_path, '[[shape]]\nname="bias"\ndtype="bf16"\nlayout="tn"\nbias=true\nactivation="relu"\n'
                         'm=256\nn=1024\nk=1024\n[[shape]]\nname="voidc"\ndtype="bf16"\nlayout="tn"\n'
                         'dtype_c="void"\nm=256\nn=1024\nk=1024\n')
    files = packs.make_pack(f, "h100-sxm", max_kernels=2, tolerance=0.03)
    meta = json.loads(files["pack.json"])
    assert [c["name"] for c in meta["classes"]] == ["bf16_tn_cbf16dbf16_bias_relu", "bf16_tn_cvoiddbf16"]
    plans = {meta["kernels"][i]["class"]: files[f"kernels/{k['dir']}/plan.cu"] for i, k in enumerate(meta["kernels"])}
    assert "epilogue.thread.bias_ptr" in plans[0] and "ptr_C" in plans[0]
    assert "epilogue.thread.bias_ptr" not in plans[1] and "ptr_C" not in plans[1]
    header = files["include/cutegen_pack.h"]
    assert "#define CUTEGEN_PACK_CLASS_1 1" in header and "CUTEGEN_PACK_CLASS_2" not in header


def test_generated_dispatcher_agrees_with_the_coverage_table(tmp_path):
    """The C++ dispatcher of the committed h100-sxm language-model pack, compiled with g++ against stub kernels
    (no nvcc, seconds): every one of its 165 exact shapes goes to the kernel the coverage table names (the
    C++ hash and probing agree with cutegen/packs/dispatch.py), M between the samples goes to a rule, unknown
    N and K to the class default, and an unaligned leading dimension to no kernel."""
    import shutil
    import subprocess
    from pathlib import Path
    from cutegen.build import find_nvcc
    gxx = shutil.which("g++")
    nvcc = find_nvcc()
    assert gxx and nvcc, "g++ and the CUDA toolkit (cuda_runtime.h) are part of this project's CI"
    cuda_inc = Path(nvcc).resolve().parent.parent / "include"
    if not (cuda_inc / "cuda_runtime.h").is_file():
        cuda_inc = Path("/usr/local/cuda/include")
    pack = Path(__file__).resolve().parent.parent / "bench" / "packs" / "llm" / "h100-sxm"
    meta = json.loads((pack / "pack.json").read_text())
    stubs = ['#include "cutegen_pack.h"']
    for k in meta["kernels"]:
        h = k["hash"]
        stubs.append(
            f'extern "C" int cutegen_{h}_plan_create(const cutegen_pack_shape*, void** o) {{ *o = nullptr; return 0; }}\n'
            f'extern "C" size_t cutegen_{h}_plan_workspace(const void*) {{ return 0; }}\n'
            f'extern "C" void cutegen_{h}_plan_destroy(void*) {{}}\n'
            f'extern "C" int cutegen_{h}_plan_run(void*, const void*, const void*, const void*, void*, const void*, '
            f'void*, size_t, cudaStream_t) {{ return 0; }}\n'
            f'extern "C" const char* cutegen_{h}_plan_error(void) {{ return ""; }}')
    stubs.append("""#include <cstdio>
int main() {
  long long m, n, k, lda;
  while (std::scanf("%lld %lld %lld %lld", &m, &n, &k, &lda) == 4) {
    cutegen_pack_shape s = cutegen_pack_shape_packed(0, m, n, k, 1);
    if (lda > 0) s.lda = lda;
    std::printf("%d|%s\\n", cutegen_pack_select(0, &s), cutegen_pack_explain(0, &s));
  }
}""")
    (tmp_path / "stubs.cpp").write_text("\n".join(stubs))
    exe = tmp_path / "dispatch"
    subprocess.run([gxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-I", str(pack / "include"), "-I", str(cuda_inc),
                    str(pack / "src" / "dispatch.cpp"), str(tmp_path / "stubs.cpp"), "-o", str(exe)], check=True)
    names = [k["name"] for k in meta["kernels"]]
    rows = meta["coverage"]["rows"]
    queries = [(r["m"], r["n"], r["k"], 0) for r in rows]
    samples = {(r["m"], r["n"], r["k"]) for r in rows}
    off = [(m, 6144, 4096, 0) for m in (3, 5, 100, 777, 3000, 12345) if (m, 6144, 4096) not in samples]
    queries += off + [(100, 5000, 4096, 0), (8, 4095, 4096, 0), (8, 4096, 4096, 4097)]
    stdin = "".join(f"{m} {n} {k} {lda}\n" for m, n, k, lda in queries)
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(queries)
    for r, line in zip(rows, out):
        idx, why = line.split("|", 1)
        assert int(idx) == names.index(r["kernel"]) and why.startswith(f"{r['kernel']}: exact shape {r['shape']} ")
    for line in out[len(rows):len(rows) + len(off)]:
        idx, why = line.split("|", 1)
        assert 0 <= int(idx) < len(names) and ": rule: N=6144 K=4096 are in the pack's set" in why
    assert ": class default: N=5000 K=4096" in out[-3] and int(out[-3].split("|")[0]) >= 0
    fallback = next(i for i, k in enumerate(meta["kernels"]) if k["name"].endswith("_fallback"))
    assert out[-2].startswith(f"{fallback}|{names[fallback]}: fallback for unaligned operands (N (D's contiguous "
                              "extent) = 4095 is not a multiple of 8 elements)")
    assert out[-1].startswith(f"{fallback}|{names[fallback]}: fallback for unaligned operands (lda = 4097")


def test_swap_ab_kernels_are_priced_on_the_transposed_problem_and_planned_swapped(tmp_path):
    """At M = 16 the search's best is a swap-AB kernel (branch smallm): the pack must price it as the search
    does (on the N x M problem its kernel runs), pick it at tolerance 0, and plan it with A and B exchanged."""
    from cutegen.search import search
    f = _write(tmp_path, '[[shape]]\nname="decode"\ndtype="bf16"\nlayout="tn"\nm=16\nn=4096\nk=4096\n')
    pts = shapes.expand(shapes.load(f), 132)
    best = search(pts[0].problem, 1).ranked[0]
    sel = select.select(pts, targets.target("h100-sxm"), max_kernels=1, tolerance=0.0)
    assert sel.rows[0].time_us == pytest.approx(best.cost, rel=1e-6)
    if best.config.swap_ab:                        # the search's choice today; the plan must follow it
        files = packs.make_pack(f, "h100-sxm", max_kernels=1, tolerance=0.0)
        plan = next(t for p, t in files.items() if p.endswith("plan.cu"))
        assert "std::swap(A, B);" in plan and "std::swap(lda, ldb);" in plan
