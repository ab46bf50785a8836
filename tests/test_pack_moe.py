"""MoE layers in packs (issue 26 part 3; cutegen/packs/grouped.py): the [[moe]] tables of a shapes file, the grouped
kernels chosen per layer, a freshly rendered MoE dispatcher compiled with g++ against stub kernels (which kernel each
token count gets, what the run passes), and the pack's files (header, CMake, PyTorch op). The nvcc build and link of
such a pack is tests/test_pack_moe_compile.py."""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
from pathlib import Path

import pytest

from cutegen.errors import FieldError
from cutegen.packs import grouped

REPO = Path(__file__).resolve().parent.parent
GEMM = '[[shape]]\nname = "proj"\ndtype = "bf16"\nlayout = "tn"\nm = [16, 128]\nn = 4096\nk = 4096\n'
MIXTRAL = ('[[moe]]\nname = "mixtral.w1"\nexperts = 8\nn = 14336\nk = 4096\ntokens = {min = 1, max = 16384}\n'
           'routing = "skewed"\n')
MASKED = ('[[moe]]\nname = "qwen3.down"\nexperts = 128\nn = 2048\nk = 768\nlayout = "masked"\n'
          'tokens = [1, 8, 64, 512]\n')


def _file(tmp_path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- the shapes file ---------------------------------------------------------------------------------------
BAD = [
    ('experts = 8\nn = 4096\nk = 4096\ntokens = 16\n', "moe[0].name", "missing"),
    ('name = "a"\nn = 4096\nk = 4096\ntokens = 16\n', "moe[0].experts", "missing"),
    ('name = "a"\nexperts = 0\nn = 4096\nk = 4096\ntokens = 16\n', "moe[0].experts", "from 1 to 1024"),
    ('name = "a"\nexperts = 1025\nn = 4096\nk = 4096\ntokens = 16\n', "moe[0].experts", "from 1 to 1024"),
    ('name = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = 16\ndtype = "f16"\n', "moe[0].dtype", "'f16'"),
    ('name = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = 16\nscale = "tensor"\n', "moe[0].scale", "bf16 takes"),
    ('name = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = 16\ndtype = "e4m3"\nscale = "none"\n', "moe[0].scale",
     "e4m3 takes"),
    ('name = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = 16\nlayout = "padded"\n', "moe[0].layout", "'padded'"),
    ('name = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = {min = 9, max = 8}\n', "moe[0].tokens", "larger than max"),
    ('name = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = 0\n', "moe[0].tokens", "from 1 to"),
    ('name = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = []\n', "moe[0].tokens", "empty list"),
    ('name = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = 16\nrouting = "zipf"\n', "moe[0].routing", "'zipf'"),
    ('name = "a"\nexperts = 2\nn = 4096\nk = 4096\ntokens = 16\nrouting = [1, 2, 3]\n', "moe[0].routing",
     "3 given, experts = 2"),
    ('name = "a"\nexperts = 2\nn = 4096\nk = 4096\ntokens = 16\nrouting = [1, -2]\n', "moe[0].routing[1]", ">= 0"),
    ('name = "a"\nexperts = 2\nn = 4096\nk = 4096\ntokens = 16\nrouting = [0, 0]\n', "moe[0].routing", "all zeros"),
    ('name = "a"\nexperts = 2\nn = 4096\nk = 4096\ntokens = 16\nweight = 0\n', "moe[0].weight", "positive"),
    ('name = "a"\nexperts = 2\nn = 4096\nk = 4096\ntokens = 16\ntopk = 2\n', "moe[0].topk", "unknown field"),
    ('name = "a b"\nexperts = 2\nn = 4096\nk = 4096\ntokens = 16\n', "moe[0].name", "letters, digits"),
]


@pytest.mark.parametrize("body,field,words", BAD)
def test_bad_moe_fields_are_one_line_errors_naming_file_table_and_field(tmp_path, body, field, words):
    f = _file(tmp_path, GEMM + "[[moe]]\n" + body)
    with pytest.raises(FieldError) as e:
        grouped.load(f)
    msg = str(e.value)
    assert msg.startswith(f"s.toml:{field}: ") and words in msg and "\n" not in msg, msg


def test_duplicate_layer_name_and_cli_error_before_any_search(tmp_path, capsys):
    from cutegen.cli import main
    f = _file(tmp_path, GEMM + MIXTRAL + MIXTRAL)
    assert main(["pack", str(f), "-o", str(tmp_path / "out"), "--target", "h200"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "cutegen: error: s.toml:moe[1].name: 'mixtral.w1' is used by an earlier [[moe]] table", err
    assert not (tmp_path / "out").exists()


def test_token_list_cap_both_sides(tmp_path):
    base = GEMM + '[[moe]]\nname = "a"\nexperts = 8\nn = 4096\nk = 4096\ntokens = [%s]\n'
    ok = grouped.load(_file(tmp_path, base % ", ".join(str(i) for i in range(1, grouped.MAX_SAMPLES_PER_LAYER + 1))))
    assert ok[0].samples == list(range(1, grouped.MAX_SAMPLES_PER_LAYER + 1))
    with pytest.raises(FieldError, match="PACK-MOE-SAMPLES-MAX: 65 token counts"):
        grouped.load(_file(tmp_path, base % ", ".join(str(i) for i in range(1, grouped.MAX_SAMPLES_PER_LAYER + 2))))


def test_layer_fields_defaults_ranges_and_histograms(tmp_path):
    f = _file(tmp_path, GEMM + MIXTRAL + MASKED +
              '[[moe]]\nname = "fp8"\nexperts = 4\nn = 4096\nk = 4096\ndtype = "e4m3"\ntokens = 64\n'
              'routing = [10, 0, 5, 5]\n'
              '[[moe]]\nname = "fp8b"\nexperts = 4\nn = 4096\nk = 4096\ndtype = "e4m3"\nscale = "block128"\n'
              'tokens = 64\n')
    a, m, h, b = grouped.load(f)
    assert (a.dtype, a.scale, a.layout, a.routing) == ("bf16", "none", "offs", "skewed")
    assert a.samples == [1 << e for e in range(15)] and a.kernel_class == "grouped_bf16_offs"
    assert m.samples == [1, 8, 64, 512] and m.kernel_class == "grouped_bf16_masked"
    assert h.scale == "tensor" and h.routing == (0.5, 0.0, 0.25, 0.25) and h.problem(64).group_sizes == (32, 0, 16, 16)
    assert b.kernel_class == "grouped_e4m3block128_offs"
    # the GEMM shapes of the same file still load (the [[moe]] key is allowed beside [[shape]])
    from cutegen.packs import shapes
    assert [e.name for e in shapes.load(f)] == ["proj"]
    with pytest.raises(FieldError, match=r"unknown top-level keys \['moes'\]"):
        shapes.load(_file(tmp_path, GEMM + MIXTRAL.replace("[[moe]]", "[[moes]]")))


# --- selection -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def selection(tmp_path_factory):
    f = tmp_path_factory.mktemp("moe") / "s.toml"
    f.write_text(GEMM + MIXTRAL + MASKED)
    return grouped.select(grouped.load(f), "h200")


def test_each_sample_runs_on_its_fastest_chosen_kernel_and_boundaries_are_the_priced_crossings(selection):
    sel = selection
    assert len(sel.layers) == 2
    for choice in sel.layers:
        L = choice.layer
        assert 1 <= len(choice.kernels) <= grouped.MAX_KERNELS_PER_LAYER
        for s in choice.samples:
            p = L.problem(s.tokens)
            priced = {j: grouped._price(p, sel.kernels[j].config, "h200") for j in choice.kernels}
            assert s.kernel == min(priced, key=lambda j: (priced[j], choice.kernels.index(j)))
            assert math.isclose(s.time_us, priced[s.kernel], rel_tol=1e-9)
            assert s.time_us <= s.best_us * (1 + sel.tolerance) + 1e-9 and s.source == "predicted"
            assert grouped.select_tokens(choice, s.tokens) == s.kernel       # the segments serve the samples
        for prev, seg in zip(choice.segments, choice.segments[1:]):
            # two-sided: at the boundary the new kernel is priced no slower, one token before it is slower
            at, before = L.problem(seg.lo), L.problem(seg.lo - 1)
            a, b = sel.kernels[prev.kernel].config, sel.kernels[seg.kernel].config
            assert grouped._price(at, b, "h200") <= grouped._price(at, a, "h200")
            assert grouped._price(before, b, "h200") > grouped._price(before, a, "h200")
    mixtral = sel.layers[0]
    assert len(mixtral.segments) >= 2                              # prefill and decode want different tiles


def test_layers_of_one_class_share_kernels_and_classes_do_not_mix(tmp_path):
    f = _file(tmp_path, GEMM + MIXTRAL + MIXTRAL.replace('"mixtral.w1"', '"again"') + MASKED)
    sel = grouped.select(grouped.load(f), "h200")
    assert sel.layers[0].kernels == sel.layers[1].kernels
    assert not set(sel.layers[0].kernels) & set(sel.layers[2].kernels)
    assert {k.cls for k in sel.kernels} == {"grouped_bf16_offs", "grouped_bf16_masked"}


def test_measured_times_from_the_database_win_and_are_labelled(tmp_path, selection):
    """A results database holding a validated grouped measurement of a (kernel, problem) on the kind is used
    instead of the prediction, and the sample says so; an unvalidated one, or one of another kind, is not."""
    from cutegen.results import ResultsDB
    from cutegen.results.measurement import Measurement
    L = selection.layers[1].layer
    cfg = selection.kernels[selection.layers[1].kernels[0]].config
    db = ResultsDB(tmp_path / "db.sqlite", seed=False)

    def rec(tokens, us, kind="h200", validated=True):
        db.add(Measurement(problem=L.problem(tokens), config=cfg, backend="cutlass_builder", device_kind=kind,
                           median_us=us, validated=validated, timing_method="cuda_events", source="test"))
    rec(8, 1.0)
    rec(8, 0.5, validated=False)
    rec(64, 0.25, kind="h100-sxm")
    sel = grouped.select([L], "h200", db=db, given={L.name: [cfg]})
    got = {s.tokens: (s.source, s.time_us) for s in sel.layers[0].samples}
    assert got[8] == ("measured", 1.0)
    assert all(src == "predicted" for t, (src, _) in got.items() if t != 8)
    assert "1 (kernel, token count) pairs measured" in sel.notes[1]


# --- the dispatcher, rendered fresh and compiled against stub kernels ---------------------------------------
STUB_MAIN = r"""
#include <cstdio>
#include <cstdlib>
#include "cutegen_pack.h"
int g_called = -1;
long long g_args[8];
int main(int argc, char** argv) {
  printf("layers %d kernels %d\n", cutegen_pack_moe_count(), cutegen_pack_moe_kernel_count());
  for (int l = 0; l < cutegen_pack_moe_count(); ++l) printf("ws %d %zu\n", l, cutegen_pack_moe_workspace_size(l));
  for (int i = 1; i + 1 < argc; i += 2) {
    int layer = atoi(argv[i]);
    long long t = atoll(argv[i + 1]);
    int k = cutegen_pack_moe_select(layer, t);
    cutegen_pack_moe_args a = cutegen_pack_moe_args_packed(layer, (void*)16, (void*)32, (void*)48, (const int32_t*)64, t);
    g_called = -1;
    int st = cutegen_pack_moe_run(layer, &a, (void*)256, 1 << 20, 0);
    printf("%d %lld -> %d ran %d st %d E %lld T %lld N %lld K %lld ldx %lld ldd %lld xgs %lld dgs %lld | %s\n", layer, t,
           k, g_called, st, g_args[0], g_args[1], g_args[2], g_args[3], g_args[4], g_args[5], g_args[6], g_args[7],
           cutegen_pack_moe_explain(layer, t));
  }
  printf("find %d %d %d\n", cutegen_pack_moe_find("qwen3.down"), cutegen_pack_moe_find("nope"),
         cutegen_pack_moe_find_layer("bf16", "none", "masked", 128, 2048, 768));
  const int bad = cutegen_pack_moe_run(7, nullptr, nullptr, 0, 0);
  printf("bad %d [%s]\n", bad, cutegen_pack_moe_last_error());
  return 0;
}
"""


def _stubs(ctx: dict) -> str:
    out = ['#include "cutegen_pack.h"', "extern int g_called;", "extern long long g_args[8];"]
    for j, g in enumerate(ctx["kernels"]):
        h = g["hash"]
        out.append(
            f'extern "C" int cutegen_{h}_grouped_gemm(const void*, const void*, void*, const int32_t*, int64_t groups, '
            "int64_t tokens, int64_t N, int64_t K, int64_t ldx, int64_t ldw, int64_t ldd, int64_t xgs, int64_t wgs, "
            "int64_t dgs, const float*, const float*, int64_t, void*, size_t, cudaStream_t) {"
            f" g_called = {j}; long long v[8] = {{groups, tokens, N, K, ldx, ldd, xgs, dgs}};"
            " for (int i = 0; i < 8; ++i) g_args[i] = v[i]; return 0; }")
        out.append(f'extern "C" size_t cutegen_{h}_grouped_workspace_size(int64_t g) {{ return {1000 * (j + 1)} + g; }}')
        out.append(f'extern "C" const char* cutegen_{h}_last_error(void) {{ return "stub {j}"; }}')
    return "\n".join(out) + "\n"


def _cuda_include() -> str:
    import os
    from cutegen.build import find_nvcc
    homes = [os.environ.get("CUDA_HOME"), str(Path(find_nvcc()).resolve().parent.parent), "/usr/local/cuda"]
    # nvcc may be a wrapper script: its exec line names the toolkit
    try:
        text = Path(find_nvcc()).read_text(errors="replace")
        homes += [str(Path(w).parent.parent) for w in text.split() if w.endswith("/bin/nvcc")]
    except OSError:
        pass
    found = [h for h in homes if h and (Path(h) / "include" / "cuda_runtime_api.h").is_file()]
    assert found, f"no CUDA toolkit headers under {homes}"
    return str(Path(found[0]) / "include")


def test_fresh_dispatcher_gives_each_token_count_its_segment_kernel(tmp_path, selection):
    from cutegen.core.templates import environment
    env = environment()
    _, ctx = grouped.files(selection, "h200", env)
    d = tmp_path / "d"
    (d / "include").mkdir(parents=True)
    # the header as the pack renders it (the GEMM part from an empty class list is enough for these symbols)
    header = env.get_template("pack_header.h.j2").render(pack_name="p", target="h200", kernels=[], classes=[],
                                                         vendor=False, generated=[], moe=ctx)
    (d / "include" / "cutegen_pack.h").write_text(header)
    (d / "moe_dispatch.cpp").write_text(env.get_template("pack_moe_dispatch.cpp.j2").render(moe=ctx))
    (d / "stubs.cpp").write_text(_stubs(ctx))
    (d / "main.cpp").write_text(STUB_MAIN)
    exe = d / "moe"
    proc = subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-I", str(d / "include"), "-I",
                           _cuda_include(), str(d / "moe_dispatch.cpp"), str(d / "stubs.cpp"), str(d / "main.cpp"),
                           "-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probes = []
    for li, c in enumerate(selection.layers):
        pts = {0, 1, 2, 3, 1000, 10**6, 2**31 - 1} | {s.tokens for s in c.samples}
        for seg in c.segments:
            pts |= {seg.lo - 1, seg.lo, seg.lo + 1}
        probes += [(li, t) for t in sorted(p for p in pts if p >= 0)]
    args = [str(x) for lt in probes for x in lt]
    out = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    assert out[0] == f"layers 2 kernels {len(selection.kernels)}"
    for li, c in enumerate(selection.layers):                 # the largest workspace of the layer's kernels
        assert out[1 + li] == f"ws {li} {max(1000 * (j + 1) + c.layer.experts for j in c.kernels)}"
    names = [grouped.kernel_name(selection, j) for j in range(len(selection.kernels))]
    for (li, t), line in zip(probes, out[3:]):
        c = selection.layers[li]
        L = c.layer
        # the rule written out from its definition: the segment [lo, next lo) holding t; below the first, the first
        los = [s.lo for s in c.segments]
        i = max([0] + [i for i, lo in enumerate(los) if lo <= t])
        want = c.segments[i].kernel
        assert want == grouped.select_tokens(c, t)
        gs = (t * L.k, t * L.n) if L.layout == "masked" else (0, 0)
        assert line.startswith(f"{li} {t} -> {want} ran {want} st 0 E {L.experts} T {t} N {L.n} K {L.k} ldx {L.k} "
                               f"ldd {L.n} xgs {gs[0]} dgs {gs[1]} | {names[want]}: MoE layer {L.name}, "), line
    assert out[-2] == "find 1 -1 1"
    assert out[-1] == "bad 5 [no MoE layer 7 (the pack has 2)]"


# --- the pack's files ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pack_files(tmp_path_factory):
    from cutegen import packs
    f = tmp_path_factory.mktemp("pk") / "s.toml"
    f.write_text(GEMM + MIXTRAL + MASKED)
    return packs.make_pack(str(f), "h200", db=None), f


def test_pack_holds_grouped_kernels_with_unique_symbols_and_every_entry(pack_files):
    files, _ = pack_files
    meta = json.loads(files["pack.json"])
    moe = meta["moe"]
    assert [L["name"] for L in moe["layers"]] == ["mixtral.w1", "qwen3.down"]
    from cutegen.ops.grouped_gemm import abi as gabi
    hashes = [k["hash"] for k in moe["kernels"]]
    assert len(set(hashes)) == len(hashes) and not set(hashes) & {k["hash"] for k in meta["kernels"]}
    cmake = files["CMakeLists.txt"]
    for k in moe["kernels"]:
        entry = files[f"kernels/{k['dir']}/entry.cu"]
        assert f"kernels/{k['dir']}/entry.cu" in cmake and "kernel.cu" in entry
        for sym in gabi.EXPORTED_SYMBOLS:              # every export of the kernel renamed with its hash
            assert f"#define {sym} cutegen_{k['hash']}_{sym[8:]}\n" in entry
        assert f"kernels/{k['dir']}/kernel.cu" in files and f"kernels/{k['dir']}/manifest.json" in files
    assert "src/moe_dispatch.cpp" in cmake
    h = files["include/cutegen_pack.h"]
    for fn in ("cutegen_pack_moe_run(", "cutegen_pack_moe_explain(", "cutegen_pack_moe_select(",
               "cutegen_pack_moe_workspace_size(", "cutegen_pack_moe_args_packed("):
        assert fn in h
    assert "#define CUTEGEN_PACK_MOE_1 1" in h
    cpp, py = files["torch/cutegen_pack_torch.cpp"], files["torch/cutegen_pack_torch.py"]
    assert 'm.def("grouped_mm(Tensor a, Tensor b, Tensor offs' in cpp and 'm.def("grouped_mm_masked(' in cpp
    assert '"cutegen::grouped_mm"' in py and '"cutegen::grouped_mm_masked"' in py
    cov = files["COVERAGE.md"]
    assert "## MoE layers (grouped GEMM)" in cov and "### qwen3.down: 128 experts" in cov
    assert "| 512 | g" in cov and "predicted" in cov
    for L in moe["layers"]:
        assert L["segments"][0]["tokens_first"] == 1
        assert all(s["source"] == "predicted" and s["floor_us"] > 0 for s in L["samples"])


def test_pack_without_moe_is_unchanged_and_masked_op_only_when_a_layer_is_masked(tmp_path, pack_files):
    from cutegen import packs
    f = _file(tmp_path, GEMM)
    plain = packs.make_pack(str(f), "h200", db=None)
    assert "moe" not in json.loads(plain["pack.json"]) and "src/moe_dispatch.cpp" not in plain
    assert "moe" not in plain["include/cutegen_pack.h"] and "grouped" not in plain["torch/cutegen_pack_torch.cpp"]
    assert "moe" not in plain["CMakeLists.txt"]
    files, _ = pack_files
    # the GEMM part of a pack with MoE layers is the pack without them, plus the MoE sections
    assert files["src/dispatch.cpp"] == plain["src/dispatch.cpp"]
    assert files["COVERAGE.md"].startswith(plain["COVERAGE.md"])
    offs_only = packs.make_pack(str(_file(tmp_path, GEMM + MIXTRAL, "o.toml")), "h200", db=None)
    assert 'm.def("grouped_mm_masked' not in offs_only["torch/cutegen_pack_torch.cpp"]
    assert "grouped_mm_masked" not in offs_only["torch/cutegen_pack_torch.py"]


def test_pack_is_deterministic_and_check_covers_the_moe_files(tmp_path, pack_files):
    from cutegen import packs
    files, f = pack_files
    again = packs.make_pack(str(f), "h200", db=None)
    assert again == files
    root = tmp_path / "pack"
    packs.write(root, files)
    assert packs.differences(root, files) == []
    d = next(p for p in files if p.endswith("entry.cu"))
    (root / d).write_text("// edited\n")
    (root / "src" / "moe_dispatch.cpp").unlink()
    assert packs.differences(root, files) == sorted([d, "src/moe_dispatch.cpp"])


# --- the GPU script's CPU half ------------------------------------------------------------------------------
def _gpu_script():
    spec = importlib.util.spec_from_file_location("gpu_pack_moe", REPO / "bench" / "gpu_pack_moe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_script_group_sizes_and_expected_kernels_agree_with_cutegen(selection, pack_files):
    from cutegen.ops.grouped_gemm.problem import GroupedGemmProblem, split_tokens
    g = _gpu_script()
    for e in (1, 8, 128):
        for t in (1, 2, 7, 100, 333, 16384):
            for routing in ("uniform", "skewed", "worst"):
                p = GroupedGemmProblem(groups=e, n=64, k=64, tokens=t, distribution=routing)
                assert g.split(t, g.fractions(routing, e)) == list(p.group_sizes)
            cs = g.cases(t, e)
            assert all(sum(v) == t and min(v) >= 0 and len(v) == e for v in cs.values())
            if e >= 8 and t >= 100:
                s = cs["empty_and_ones"]
                assert s.count(0) >= e // 3 and 1 in s          # empty groups and 1-token groups
    assert tuple(g.split(10, [0.3, 0.7])) == split_tokens(10, (0.3, 0.7))
    files, _ = pack_files
    meta = json.loads(files["pack.json"])
    for L in meta["moe"]["layers"]:
        choice = next(c for c in selection.layers if c.layer.name == L["name"])
        for t in (1, 5, 64, 100, 1000, 5000, 20000):
            assert g.expected_kernel(L, t) == grouped.kernel_name(selection, grouped.select_tokens(choice, t))


def test_gpu_script_plan_step_writes_the_pack(tmp_path):
    """bench/gpu_pack_moe.sh --plan renders the carried pack (on a small shapes file here)."""
    f = _file(tmp_path, GEMM + MASKED)
    proc = subprocess.run(["bash", str(REPO / "bench" / "gpu_pack_moe.sh"), "--plan"], cwd=REPO, capture_output=True,
                          text=True, timeout=600,
                          env={**__import__("os").environ, "PLAN": str(tmp_path / "plan"), "SHAPES": str(f),
                               "NAME": "moe_pack"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads((tmp_path / "plan" / "h200" / "pack.json").read_text())
    assert meta["name"] == "moe_pack" and [L["name"] for L in meta["moe"]["layers"]] == ["qwen3.down"]
    assert (tmp_path / "plan" / "h200" / "torch" / "moe_pack_torch.cpp").is_file()


def test_fp8_layers_select_kernels_of_their_own_class(tmp_path):
    """e4m3 layers (per-tensor and block128 scales) get grouped kernels of their class; the dispatcher records the
    scale kind, which the PyTorch op and cutegen_pack_moe_find_layer match on."""
    f = _file(tmp_path, GEMM + '[[moe]]\nname = "t"\nexperts = 8\nn = 4096\nk = 4096\ndtype = "e4m3"\n'
                              'tokens = [16, 4096]\n'
                              '[[moe]]\nname = "b"\nexperts = 8\nn = 4096\nk = 4096\ndtype = "e4m3"\n'
                              'scale = "block128"\ntokens = [16, 4096]\n')
    sel = grouped.select(grouped.load(f), "h200")
    from cutegen.core.templates import environment
    env = environment()
    gfiles, ctx = grouped.files(sel, "h200", env)
    assert {k.cls for k in sel.kernels} == {"grouped_e4m3tensor_offs", "grouped_e4m3block128_offs"}
    assert [(L["dtype"], L["scale"]) for L in ctx["layers"]] == [("e4m3", "tensor"), ("e4m3", "block128")]
    src = env.get_template("pack_moe_dispatch.cpp.j2").render(moe=ctx)
    assert '"t", 8, 4096, 4096, "e4m3", "tensor", "offs", false' in src
    assert '"b", 8, 4096, 4096, "e4m3", "block128", "offs", false' in src
    for k in ctx["kernels"]:
        assert "GROUPED-ABI-SCALE" in gfiles[f"kernels/{k['dir']}/kernel.cu"]


class _ReferenceOps:
    """torch.ops.cutegen's MoE ops as their docstrings define them, on the CPU (for the GPU script's CPU half):
    per group, (X_i * scale) @ (W_i * scale)^T, written in bf16; rows past the groups are left as they were."""

    def __init__(self, layers: list[dict], wrong: bool = False):
        self.layers, self.wrong = layers, wrong

    def _group(self, x, b_i, sx, sw_i, sx_rows=None):
        import torch
        xa, wb = x.float(), b_i.float()                    # wb: (K, N)
        k, n = wb.shape
        if sx is not None and sx_rows is not None:         # block128
            xa = xa * sx_rows.repeat_interleave(128, -1)[..., :k]
            wb = wb * sw_i.t().repeat_interleave(128, 0).repeat_interleave(128, 1)[:k, :n]
            return xa @ wb
        out = xa @ wb
        if sx is not None:
            out = out * sx.reshape(-1)[0] * sw_i
        return out + (1e-3 if self.wrong else 0.0) * out.abs().max().clamp_min(1.0) * torch.ones_like(out)

    def grouped_mm(self, x, b, offs, sx=None, sw=None):
        import torch
        out = torch.zeros(x.shape[0], b.shape[2], dtype=torch.bfloat16)
        start = 0
        for i, end in enumerate(offs.tolist()):
            if end > start:
                block = sx is not None and sx.dim() == 2
                out[start:end] = self._group(x[start:end], b[i], sx, None if sw is None else sw[i],
                                             sx[start:end] if block else None).to(torch.bfloat16)
            start = max(start, end)
        return out

    def grouped_mm_masked(self, x, b, counts, sx=None, sw=None):
        import torch
        out = torch.zeros(x.shape[0], x.shape[1], b.shape[2], dtype=torch.bfloat16)
        for i, c in enumerate(counts.tolist()):
            if c:
                block = sx is not None and sx.dim() == 3
                out[i, :c] = self._group(x[i, :c], b[i], sx, None if sw is None else sw[i],
                                         sx[i, :c] if block else None).to(torch.bfloat16)
        return out

    def grouped_explain(self, a, b, masked, sx=None):
        g = _gpu_script()
        L = next(L for L in self.layers if L["experts"] == b.shape[0] and L["n"] == b.shape[2] and L["k"] == b.shape[1]
                 and (L["dtype"] == "bf16") == (a.dtype.itemsize == 2) and (L["layout"] == "masked") == masked
                 and (L["scale"] != "block128" or sx.dim() >= 2) and (L["scale"] != "tensor" or sx.dim() < 2))
        return f"{g.expected_kernel(L, a.shape[1] if masked else a.shape[0])}: MoE layer {L['name']}"


def test_gpu_script_validation_half_on_the_cpu_with_a_reference_op(monkeypatch):
    """bench/gpu_pack_moe.py's validation (operands, FP8 scales, float32 references, cases, dispatch check) run on the
    CPU against a reference op written from the op's documented semantics: every case passes; an op off by 0.1% of
    the output's range is still within the tolerance, one off by 5% is caught."""
    import torch
    g = _gpu_script()
    monkeypatch.setattr(g, "DEVICE", "cpu")
    seg = lambda name: [{"tokens_first": 1, "kernel": f"{name}_a"}, {"tokens_first": 50, "kernel": f"{name}_b"}]  # noqa: E731
    metas = [{"name": n, "experts": 4, "n": 256, "k": 384, "layout": lay, "dtype": dt, "scale": sc, "routing": "skewed",
              "segments": seg(n), "samples": [{"tokens": 8}, {"tokens": 64}]}
             for n, lay, dt, sc in (("bf", "offs", "bf16", "none"), ("pt", "offs", "e4m3", "tensor"),
                                    ("bl", "offs", "e4m3", "block128"), ("mk", "masked", "bf16", "none"))]
    for wrong, expect_fail in ((False, False), (True, False)):
        ops = _ReferenceOps(metas, wrong)
        gen = torch.Generator(device="cpu").manual_seed(1)
        for m in metas:
            fails, info = [], {"dispatch": [], "validated": 0, "max_rel_err": 0.0, "max_rel_vs_torch": 0.0}
            g.validate_layer(g.Layer(ops, m, gen), info, fails.append, t_end=float("inf"))
            real = [f for f in fails if "CUDA graph" not in f]    # no CUDA here: the graph step reports itself
            assert bool(real) == expect_fail, (m["name"], real)
            assert info["validated"] >= 12 and info["max_rel_err"] < g.TOL
            assert [d["kernel"] == d["expected"] for d in info["dispatch"]] == [True] * len(info["dispatch"])

    class Off(_ReferenceOps):
        def grouped_mm(self, x, b, offs, sx=None, sw=None):
            out = super().grouped_mm(x, b, offs, sx, sw)
            return out * 1.05
    fails = []
    info = {"dispatch": [], "validated": 0, "max_rel_err": 0.0, "max_rel_vs_torch": 0.0}
    g.validate_layer(g.Layer(Off(metas), metas[2], torch.Generator(device="cpu").manual_seed(2)), info, fails.append,
                     t_end=float("inf"))
    assert any("rel err" in f for f in fails)
