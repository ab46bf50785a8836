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


def _dispatcher(tmp_path, files: dict[str, str], main_src: str | None = None):
    """The pack's freshly rendered src/dispatch.cpp, compiled with g++ against stub kernels (no nvcc, seconds):
    returns ``query([(M, N, K, lda or 0), ...]) -> [(kernel index, explanation), ...]`` for class 0."""
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
    pack = tmp_path / "pack"
    for rel in ("src/dispatch.cpp", "include/cutegen_pack.h"):
        (pack / rel).parent.mkdir(parents=True, exist_ok=True)
        (pack / rel).write_text(files[rel])
    meta = json.loads(files["pack.json"])
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
    if "src/vendor_cublaslt.cpp" in files:      # the vendor tactic's entry points (tests/test_pack_vendor.py)
        stubs.append("namespace cutegen_pack_vendor {\n"
                     "int plan_create(int, const cutegen_pack_shape*, void** o) { *o = nullptr; return 0; }\n"
                     "const char* algorithm_note(int, const cutegen_pack_shape*) { return \"stub\"; }\n"
                     "size_t plan_workspace(const void*) { return 0; }\nvoid plan_destroy(void*) {}\n"
                     "int plan_run(void*, const void*, const void*, const void*, void*, const void*, void*, size_t, "
                     "cudaStream_t) { return 0; }\nconst char* plan_error() { return \"\"; }\n}")
    stubs.append(main_src or """#include <cstdio>
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

    def query(qs):
        stdin = "".join(f"{m} {n} {k} {lda}\n" for m, n, k, lda in qs)
        out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(out) == len(qs)
        return [(int(line.split("|", 1)[0]), line.split("|", 1)[1]) for line in out]
    return query


# Four kernels generated/llm carries for N = K = 4096 (M = 1, 16, 128, 2048): small-M swap-AB tiles to a
# 128x256 tile, so the cheapest kernel changes several times along M.
DISPATCH_KERNELS = ["generated/llm/sm90a/bf16_tn_m1n4096k4096_cbf16dbf16", "generated/llm/sm90a/bf16_tn_m16n4096k4096_cbf16dbf16",
                    "generated/llm/sm90a/bf16_tn_m128n4096k4096_cbf16dbf16", "generated/llm/sm90a/bf16_tn_m2048n4096k4096_cbf16dbf16"]
DISPATCH_SHAPES = ('[[shape]]\nname="qkv"\ndtype="bf16"\nlayout="tn"\nm=[1, 16, 128, 2048, 8192]\nn=6144\nk=4096\n'
                   '[[shape]]\nname="o"\ndtype="bf16"\nlayout="tn"\nm=[1, 16, 128, 2048, 8192]\nn=4096\nk=4096\n')


def _oracle_bucket(m: int) -> int:
    return min(m.bit_length() - 1, 30)          # floor(log2 M): [2^b, 2^(b+1) - 1], the last bucket open


def _oracle_choice(configs, problems, rates) -> int:
    """The dispatch rule, written out from its definition (cutegen/packs/dispatch.py docstring), not called:
    the kernel with the lowest sum over problems of predicted time / the best predicted time; ties to the
    lower index."""
    score = []
    for j, cfg in enumerate(configs):
        total = 0.0
        for p in problems:
            ts = [select.predicted_time(p, c, rates) for c in configs]
            best = min(t for t in ts if t is not None)
            total += ts[j] / best if ts[j] is not None else 1e9
        score.append((total, j))
    return min(score)[1]


def test_fresh_dispatcher_sends_each_off_table_shape_to_the_kernel_the_rule_defines(tmp_path):
    """A freshly rendered dispatcher (not a committed one), compiled with g++: every exact shape goes to the
    fastest kernel; every M between the samples (both ends and the middle of each power-of-two bucket) of a
    known N, K, and every M of an unknown N, K, goes to the kernel the rule's definition picks, computed here
    from predicted times; an unaligned leading dimension goes to the fallback, or to no kernel without one."""
    from pathlib import Path
    from cutegen.config import KernelConfig
    from cutegen.packs import render
    repo = Path(__file__).resolve().parent.parent
    configs = [KernelConfig.from_dict(json.loads((repo / d / "manifest.json").read_text())["config"])
               for d in DISPATCH_KERNELS]
    t = targets.target("h100-sxm")
    pts = shapes.expand(shapes.load(_write(tmp_path, DISPATCH_SHAPES)), t.sms)
    sel = select.given(pts, t, configs)
    files = render.pack_files(sel, {}, "cutegen_pack", "d.toml")
    names = [k["name"] for k in json.loads(files["pack.json"])["kernels"]]
    query = _dispatcher(tmp_path, files)
    proto = pts[0].problem
    cases = []        # (M, N, K, lda, expected kernel, words of the explanation)
    for s in pts:     # the exact shapes: the fastest predicted kernel
        p = s.problem
        ts = [select.predicted_time(p, c, t.rates) for c in configs]
        cases.append((p.m, p.n, p.k, 0, min((x, j) for j, x in enumerate(ts) if x is not None)[1], "exact shape"))
    samples = {(s.problem.m, s.problem.n, s.problem.k) for s in pts}
    ms = sorted({m for b in range(15) for m in ((1 << b), (1 << b) + (1 << b) // 2, (1 << (b + 1)) - 1)}
                | {3, 100, 777, 3000, 12345, 100000, 2**31 - 1})
    def bucket_problems(n, k, m):
        b = _oracle_bucket(m)
        lo, hi = 1 << b, min((1 << (b + 1)) - 1, 2**31 - 1)
        return [proto.replace(m=x, n=n, k=k) for x in sorted({lo, min(hi, lo + lo // 2), hi})]
    for n, k in ((6144, 4096), (4096, 4096)):
        for m in ms:
            if (m, n, k) not in samples:
                cases.append((m, n, k, 0, _oracle_choice(configs, bucket_problems(n, k, m), t.rates),
                              f"rule: N={n} K={k} are in the pack's set"))
    for m in ms:     # N, K outside the set: summed over the set's (N, K) at this M bucket
        probs = [q for n, k in ((6144, 4096), (4096, 4096)) for q in bucket_problems(n, k, m)]
        cases.append((m, 5120, 4096, 0, _oracle_choice(configs, probs, t.rates), "class default: N=5120 K=4096"))
    cases.append((8, 4096, 4096, 4097, -1, "not covered: lda = 4097 is not a multiple of 8 elements"))
    got = query([c[:4] for c in cases])
    wrong = [(c[:3], c[4], g[0], g[1]) for c, g in zip(cases, got) if g[0] != c[4] or c[5] not in g[1]]
    assert not wrong, f"{len(wrong)} of {len(cases)} shapes dispatched otherwise than the rule: {wrong[:6]}"
    for (m, n, k, _, j, _), (_, why) in zip(cases, got):
        if j >= 0:
            assert why.startswith(names[j] + ": ")
    # the test has teeth: along M the chosen kernel changes at bucket edges, so a bucket off by one, or a
    # rule that picks another kernel than the definition's, sends some shape elsewhere
    rule = [c for c in cases if c[5].startswith("rule: N=4096")]
    changes = sum(1 for a, b in zip(rule, rule[1:]) if a[4] != b[4])
    assert changes >= 2 and len({c[4] for c in cases if c[4] >= 0}) >= 3


def test_fresh_dispatcher_routes_unaligned_operands_to_the_fallback(tmp_path):
    f = _write(tmp_path, TINY)
    files = packs.make_pack(f, "h100-sxm", max_kernels=1, tolerance=0.03)
    meta = json.loads(files["pack.json"])
    names = [k["name"] for k in meta["kernels"]]
    fallback = names.index(meta["classes"][0]["fallback"])
    out = _dispatcher(tmp_path, files)([(8, 4095, 4096, 0), (8, 4096, 4096, 4097), (8, 4096, 4096, 4104)])
    assert out[0] == (fallback, f"{names[fallback]}: fallback for unaligned operands (N (D's contiguous extent) = "
                                "4095 is not a multiple of 8 elements): the class's smallest-alignment kernel")
    assert out[1][0] == fallback and "(lda = 4097 is not a multiple of 8 elements)" in out[1][1]
    assert out[2][0] == 0 and "rule: N=4096 K=4096" in out[2][1]          # lda 4104 = 8 * 513: aligned


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


def test_every_exported_name_of_a_kernel_is_renamed_in_its_pack(tmp_path):
    """Issue 22: stream-K kernels export the launch-plan pair (cutegen_gemm_plan, cutegen_workspace_size_plan)
    besides the four-function ABI; a pack links many kernels into one library, so its plan.cu must rename
    every extern "C" name the included kernel.cu defines, or two stream-K kernels collide at link time.
    The names are read from the rendered kernel, not from the list plan.cu is rendered with."""
    import re
    from pathlib import Path
    from cutegen.abi import EXPORTED_SYMBOLS
    from cutegen.config import KernelConfig
    repo = Path(__file__).resolve().parent.parent
    cfg = lambda rel: KernelConfig.from_dict(json.loads((repo / rel / "manifest.json").read_text())["config"])  # noqa: E731
    stream_k = cfg("generated/sm90a/bf16_tn_m128n8192k8192_cbf16dbf16")
    persistent = cfg("generated/llm/sm90a/bf16_tn_m1n6144k4096_cbf16dbf16")
    assert stream_k.tile_scheduler == "stream_k" and persistent.tile_scheduler != "stream_k"
    f = _write(tmp_path, '[[shape]]\nname="p"\ndtype="bf16"\nlayout="tn"\nm=[1, 128]\nn=8192\nk=8192\n')
    t = targets.target("h100-sxm")
    sel = select.given(shapes.expand(shapes.load(f), t.sms), t, [stream_k, persistent])
    from cutegen.packs import render
    files = render.pack_files(sel, {}, "cutegen_pack", "p.toml")
    exports_seen = {}
    for kdir in sorted({p.split("/")[1] for p in files if p.startswith("kernels/")}):
        kernel = files[f"kernels/{kdir}/kernel.cu"]
        plan = files[f"kernels/{kdir}/plan.cu"]
        h = kdir.split("_", 1)[1]
        exported = re.findall(r"^CUTEGEN_EXPORT [\w\s*]*?\b(cutegen_\w+)\(", kernel, re.M)
        exports_seen[kdir] = exported
        assert set(exported) <= set(EXPORTED_SYMBOLS)
        for name in exported:
            assert f"#define {name} cutegen_{h}_{name[len('cutegen_'):]}\n" in plan, (kdir, name)
            assert plan.index(f"#define {name} ") < plan.index('#include "kernel.cu"') < plan.index(f"#undef {name}\n")
    counts = sorted(len(v) for v in exports_seen.values())
    assert counts == [4, 6]          # the persistent kernel: the four functions; the stream-K one: + the plan pair


# --- bounded work (issue 22) ---------------------------------------------------------------------------
def test_shape_count_cap_is_a_one_line_error_on_both_sides_of_the_bound(tmp_path, capsys):
    """PACK-SHAPES-MAX: MAX_SHAPES sample points pass, one more is refused naming the file, the entry and
    the rule; a list of 100,000 M values (issue 22: minutes of silent search) is refused at once."""
    import time
    from cutegen.errors import FieldError as FE
    f = _write(tmp_path, TINY)
    base = shapes.expand(shapes.load(f), 132)[0]
    at = [shapes.Shape("proj", base.problem.replace(m=m), 1.0) for m in range(1, packs.MAX_SHAPES + 1)]
    assert packs.check_size(f, at) > 0                                  # 4096 points: accepted
    over = at + [shapes.Shape("proj", base.problem.replace(m=packs.MAX_SHAPES + 1), 1.0)]
    with pytest.raises(FE, match="PACK-SHAPES-MAX: the shapes file expands to 4097 sample points") as e:
        packs.check_size(f, over)
    assert e.value.field == "shapes.toml:proj"
    big = _write(tmp_path, '[[shape]]\nname="many"\ndtype="bf16"\nlayout="tn"\nm=[' +
                 ", ".join(str(m) for m in range(1, 100001)) + ']\nn=4096\nk=4096\n', "big.toml")
    t0 = time.monotonic()
    capsys.readouterr()
    assert main(["pack", big, "-o", str(tmp_path / "o")]) != 0
    assert time.monotonic() - t0 < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "big.toml:many" in err[0] and "PACK-SHAPES-MAX" in err[0] and "100000" in err[0]


def test_one_search_per_m_bucket_whatever_the_number_of_m_values(tmp_path, monkeypatch):
    """Searches run per (class, N, K) and M bucket (SEARCH_BUCKET_BITS), not per M value: 200 M values in
    [256, 1023] of one (N, K) are one search; every one of them is still priced and gets a row."""
    calls = []
    real = select.search_task
    monkeypatch.setattr(select, "search_task", lambda item: calls.append(item[0].m) or real(item))
    f = _write(tmp_path, '[[shape]]\nname="p"\ndtype="bf16"\nlayout="tn"\nm=[' +
               ", ".join(str(m) for m in range(256, 1024, 4)) + ']\nn=4096\nk=4096\n')
    pts = shapes.expand(shapes.load(f), 132)
    assert len(pts) == 192
    sel = select.select(pts, targets.target("h100-sxm"), max_kernels=2, tolerance=0.03)
    assert calls == [256]                       # bucket [256, 1023] of 4^4..4^5: its first sampled M
    assert len(sel.rows) == 192 and all(r.kernel is not None for r in sel.rows)


def test_search_progress_bar_shows_count_and_time_left(capsys):
    done = select.run_searches(lambda x: x * 2, [1, 2, 3], ["a", "b", "c"], progress="search h200")
    assert done == [2, 4, 6]
    err = capsys.readouterr().err
    assert "search h200" in err and "3/3" in err and "left" in err
    select.run_searches(lambda x: x, [1], ["a"])            # no description: nothing shown
    assert capsys.readouterr().err == ""


# --- committed packs are current (issue 22) ------------------------------------------------------------
def test_summary_only_writes_and_checks_the_record_alone(tmp_path, capsys):
    f = _write(tmp_path, TINY)
    out = tmp_path / "out"
    base = ["pack", f, "-o", str(out), "--max-kernels", "1", "--summary-only"]
    assert main(base) == 0
    assert sorted(p.name for p in (out / "h100-sxm").iterdir()) == ["COVERAGE.md", "pack.json"]
    assert main(base + ["--check"]) == 0
    (out / "h100-sxm" / "user-notes.txt").write_text("kept")
    assert main(base + ["--check"]) == 0                  # files outside the record are not its business
    text = (out / "h100-sxm" / "pack.json").read_text()
    (out / "h100-sxm" / "pack.json").write_text(text.replace('"tolerance": 0.03', '"tolerance": 0.05'))
    capsys.readouterr()
    assert main(base + ["--check"]) == 1
    assert "pack.json" in capsys.readouterr().out


def test_committed_packs_are_what_the_code_selects_today():
    """bench/packs/<set>/<kind>/ commits each pack's record (pack.json, COVERAGE.md; the sources are
    regenerated by `bash bench/gpu_pack.sh --plan`): `cutegen pack --summary-only --check` must find nothing
    to change. When it fails, regenerate with the command in bench/packs/README.md and commit the record."""
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    root = repo / "bench" / "packs"
    sets = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert sets == ["llm", "moe", "qwen2.5"]
    for s in sets:
        kinds = sorted(p.name for p in (root / s).iterdir() if p.is_dir())
        assert kinds == ["h200"]
        for kind in kinds:
            files = sorted(p.name for p in (root / s / kind).iterdir())
            # a measured pack (pack --tune) commits the records it was selected from, and is checked against them
            assert files in (["COVERAGE.md", "pack.json"], ["COVERAGE.md", "measurements.jsonl.gz", "pack.json"])
            name = json.loads((root / s / kind / "pack.json").read_text())["name"]
            tuned = (["--tune", "--records", str(root / s / kind / "measurements.jsonl.gz")]
                     if "measurements.jsonl.gz" in files else [])
            assert main(["pack", str(repo / "examples" / "pack" / f"{s}.toml"), "-o", str(root / s), "--target", kind,
                         "--name", name, "--summary-only", "--check"] + tuned) == 0, f"bench/packs/{s}/{kind} is out of date"


def test_second_family_off_sample_m_values_are_not_sample_points():
    """examples/pack/qwen2.5.toml lists off-sample M values fixed before tuning (bench/gpu_pack.sh times them):
    none may be a sample point of either committed shapes file, on any target's SM count."""
    import re
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    text = (repo / "examples" / "pack" / "qwen2.5.toml").read_text()
    off = [int(x) for x in re.search(r"never sampled.*?:\s*([\d,\s]+)\.", text, re.S).group(1).replace("\n", " ")
           .replace("#", " ").split(",")]
    script = (repo / "bench" / "gpu_pack.sh").read_text()
    assert sorted(off) == sorted(int(x) for x in re.search(r"OFF_SAMPLE:-([\d,]+)", script).group(1).split(","))
    assert len(off) >= 10
    for f in ("qwen2.5.toml", "llm.toml"):
        for kind in ("h100-sxm", "h200", "h100-pcie"):
            ms = {s.problem.m for s in shapes.expand(shapes.load(repo / "examples" / "pack" / f), targets.target(kind).sms)}
            assert not ms & set(off), (f, kind, sorted(ms & set(off)))


def test_plan_on_a_given_kernel_bypasses_the_dispatcher(tmp_path):
    """cutegen_pack_plan_kernel (what bench/gpu_pack.py times every kernel with): any kernel index of the pack
    plans on that kernel whatever the dispatcher would pick; an index outside the pack is status 5."""
    f = _write(tmp_path, TINY)
    files = packs.make_pack(f, "h100-sxm", max_kernels=2, tolerance=0.0)
    names = [k["name"] for k in json.loads(files["pack.json"])["kernels"]]
    assert len(names) >= 2
    prog = """#include <cstdio>
int main() {
  cutegen_pack_shape s = cutegen_pack_shape_packed(0, 16, 4096, 4096, 1);
  for (int k = -1; k <= cutegen_pack_kernel_count(); ++k) {
    cutegen_pack_plan_t plan = nullptr;
    int st = cutegen_pack_plan_kernel(k, &s, &plan);
    std::printf("%d|%d|%s|%d\\n", k, st, plan ? cutegen_pack_plan_kernel_name(plan) : cutegen_pack_last_error(),
                cutegen_pack_kernel_class(k));
    cutegen_pack_plan_destroy(plan);
  }
}"""
    _dispatcher(tmp_path, files, prog)
    import subprocess
    out = subprocess.run([str(tmp_path / "dispatch")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("-1|5|kernel -1 is not one of this pack's") and out[0].endswith("|-1")
    for k, name in enumerate(names):
        assert out[k + 1] == f"{k}|0|{name}|0"
    assert out[-1].startswith(f"{len(names)}|5|kernel {len(names)} is not one of")


def test_measured_segments_put_boundaries_where_measured_curves_cross(tmp_path):
    """--measured (bench/gpu_pack.py's results of this pack): on N = K = 4096 the measured winner is k01 at
    M = 16, k02 at 128, k03 at 2048; the boundaries are where the curves cross, linear in log2 M: k01 10 -> 30 us
    and k02 14 -> 20 us cross at 2^(4 + 3 * 4/14) = 28.97 (M 28 -> k01, 29 -> k02); k02 20 -> 200 us and k03
    25 -> 150 us at 2^(7 + 4 * 5/55) = 164.7 (M 164 -> k02, 165 -> k03). No power of two. N = 6144 has no
    measurements and keeps its predicted buckets; the measured set shape reports torch.matmul's time (a set shape
    that was not measured keeps its exact-table entry, so M = 2, not 1, probes the first segment)."""
    from pathlib import Path
    from cutegen.config import KernelConfig
    from cutegen.packs import render
    repo = Path(__file__).resolve().parent.parent
    configs = [KernelConfig.from_dict(json.loads((repo / d / "manifest.json").read_text())["config"])
               for d in DISPATCH_KERNELS]
    t = targets.target("h100-sxm")
    pts = shapes.expand(shapes.load(_write(tmp_path, DISPATCH_SHAPES)), t.sms)
    names = [k["name"] for k in json.loads(render.pack_files(select.given(pts, t, configs), {}, "p", "d.toml")
                                           ["pack.json"])["kernels"]]
    times = {16: [50, 10, 14, 40], 128: [90, 30, 20, 25], 2048: [900, 400, 200, 150]}
    res = {"pack": "p", "time": [{"m": m, "n": 4096, "k": 4096, "matmul_us": 22.0 if m == 128 else 100.0,
                                  "per_kernel_us": dict(zip(names, ts))} for m, ts in times.items()]}
    results = tmp_path / "results.json"
    results.write_text(json.dumps(res))
    sel = select.given(pts, t, configs)
    points = render.apply_measured(sel, str(results), "p")
    # the vendor tactic off: at M = 2048 torch.matmul (100 us) beats every kernel (tests/test_pack_vendor.py)
    files = render.pack_files(sel, {}, "p", "d.toml", measured=points, vendor_on=False)
    query = _dispatcher(tmp_path, files)
    got = query([(m, 4096, 4096, 0) for m in (2, 28, 29, 100, 164, 165, 5000)] + [(100, 6144, 4096, 0)])
    assert [g[0] for g in got[:7]] == [1, 1, 2, 2, 2, 3, 3]
    assert "measured segment: N=4096 K=4096, M in [29, 164]" in got[3][1]
    assert "measured segment: N=4096 K=4096, M in [165, 2^31-1]" in got[5][1]
    assert got[7][1].startswith(names[got[7][0]] + ": rule: N=6144 K=4096")
    # the set shape M = 128 was measured: its row and its exact-table entry are the measured winner
    row = next(r for r in json.loads(files["pack.json"])["coverage"]["rows"] if (r["m"], r["n"]) == (128, 4096))
    assert (row["kernel"], row["source"], row["time_us"], row["cublas_us"], row["cublas_ratio"]) == \
        (names[2], "measured", 20.0, 22.0, 1.1)
    assert query([(128, 4096, 4096, 0)])[0][0] == 2
    assert "| torch.matmul (us) | its time / the pack's |" in files["COVERAGE.md"]
    # results of another pack are refused, naming the file and field
    with pytest.raises(FieldError, match="results.json:pack"):
        render.apply_measured(select.given(pts, t, configs), str(results), "other")


def test_kernels_whose_abi_does_extra_work_are_not_packable():
    """A staged kernel copies operands in its C ABI, a split-K kernel with a separate reduction launches the
    reduction there; the pack's plan entry points do neither, so neither may enter a pack (the database's
    measured candidates included); a plain kernel may."""
    from pathlib import Path
    from cutegen.config import KernelConfig
    repo = Path(__file__).resolve().parent.parent
    plain = KernelConfig.from_dict(json.loads((repo / DISPATCH_KERNELS[2] / "manifest.json").read_text())["config"])
    assert select.plan_ready(plain)
    assert not select.plan_ready(plain.replace(stage_a=True))
    assert not select.plan_ready(plain.replace(split_k_slices=2))
    t = targets.target("h100-sxm")
    pts = [shapes.Shape("p", select.GemmProblem.from_dict({"dtype": "bf16", "layout": "tn", "m": 128, "n": 4096,
                                                             "k": 4096}), 1.0)]
    with pytest.raises(CutegenError, match="reduces split-K slices in its C ABI"):
        select.given(pts, t, [plain.replace(split_k_slices=2)])
