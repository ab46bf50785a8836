"""validate and bench end to end on the CPU, with a stand-in kernel library (no GPU).

A small C library exports the cutegen ABI (abi.py) and computes a bf16 GEMM on host memory,
refusing calls the way the CUTLASS template does (E15/E16/E18 messages). With
CUTEGEN_RUNNER_DEVICE=cpu the worker allocates numpy host buffers (cutegen/_runner_host.py), so the
whole path -- discovery, spawned worker, preflight, refusal probes, reference, timing, results file
-- runs here without torch. Modes (CUTEGEN_FAKE_MODE): hang (never returns), wrong (result off by
10 %), no_checks (launches whatever it is given). Needs a C compiler (nvcc needs one anyway).
"""
import json
import shutil
import subprocess

import pytest

CC = shutil.which("cc") or shutil.which("gcc")

from cutegen import GemmProblem, KernelConfig  # noqa: E402
from cutegen.commands import bench as B  # noqa: E402
from cutegen.commands import validate as V  # noqa: E402

FAKE_KERNEL_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char last_error[512];
static int fail(const char* msg) { snprintf(last_error, sizeof last_error, "%s", msg); return 1; }
static float ld_bf16(const uint16_t* p) { uint32_t u = (uint32_t)(*p) << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7FFF + ((u >> 16) & 1); return (uint16_t)(u >> 16); }

/* rows x cols operand; row_major: cols contiguous. Mirrors templates/cutegen_abi.inc.j2's check_operand. */
static int check(const char* name, const char* rule, const void* p, int64_t rows, int64_t cols, int row_major,
                 int64_t ld, int64_t batch, int64_t bs) {
  static char msg[256];
  int64_t contiguous = row_major ? cols : rows, outer = row_major ? rows : cols;
  if (((uintptr_t)p) % 16) { snprintf(msg, sizeof msg, "E18: %s pointer is not 16-byte aligned", name); return fail(msg); }
  if (contiguous % 8) { snprintf(msg, sizeof msg, "%s: %s contiguous extent %lld", rule, name, (long long)contiguous); return fail(msg); }
  if (ld < contiguous) { snprintf(msg, sizeof msg, "A10: %s ld below extent", name); return fail(msg); }
  if (ld % 8) { snprintf(msg, sizeof msg, "%s: %s leading dimension %lld", rule, name, (long long)ld); return fail(msg); }
  if (batch > 1 && bs % 8) { snprintf(msg, sizeof msg, "%s: %s batch stride %lld", rule, name, (long long)bs); return fail(msg); }
  if (batch > 1 && bs < ld * outer) { snprintf(msg, sizeof msg, "A10: %s batch overlap", name); return fail(msg); }
  return 0;
}

int cutegen_gemm(const void* A, const void* Bm, const void* C, void* D, int64_t M, int64_t N, int64_t K,
                 int64_t batch, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd, int64_t bsa, int64_t bsb,
                 int64_t bsc, int64_t bsd, float alpha, float beta, const void* bias, void* ws, size_t wsb,
                 void* stream) {
  const char* mode = getenv("CUTEGEN_FAKE_MODE");
  mode = mode ? mode : "";
  if (M < 1 || N < 1 || K < 1 || batch < 1) return fail("ABI-EXTENT: bad extents");
  if (!A || !Bm || !D) return fail("ABI-NULL: A, B or D is NULL");
  if (beta != 0.0f && !C) return fail("ABI-NULL: C is NULL but beta is not 0");
  if (strcmp(mode, "no_checks") != 0) {
    if (check("A", "E15", A, M, K, A_ROW, lda, batch, bsa) || check("B", "E15", Bm, K, N, B_ROW, ldb, batch, bsb) ||
        check("D", "E16", D, M, N, D_ROW, ldd, batch, bsd)) return 1;
    if (C && check("C", "E16", C, M, N, D_ROW, ldc, batch, bsc)) return 1;
    if (!C && ((D_ROW ? N : M) % 8)) return fail("E16: C contiguous extent");
  }
  if (strcmp(mode, "hang") == 0) for (;;) sleep(1);
  float scale = strcmp(mode, "wrong") == 0 ? 1.1f : 1.0f;
  const uint16_t *a = A, *b = Bm, *c = C; uint16_t* d = D;
  for (int64_t l = 0; l < batch; ++l)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k)
          acc += ld_bf16(a + l * bsa + (A_ROW ? m * lda + k : k * lda + m)) *
                 ld_bf16(b + l * bsb + (B_ROW ? k * ldb + n : n * ldb + k));
        float out = alpha * acc * scale;
        if (c && beta != 0.0f) out += beta * ld_bf16(c + l * bsc + (D_ROW ? m * ldc + n : n * ldc + m));
        d[l * bsd + (D_ROW ? m * ldd + n : n * ldd + m)] = to_bf16(out);
      }
  last_error[0] = 0;
  return 0;
}
size_t cutegen_workspace_size(int64_t M, int64_t N, int64_t K, int64_t batch) { return 0; }
const char* cutegen_describe(void) { return "{\"backend\": \"fake\"}"; }
const char* cutegen_last_error(void) { return last_error; }
"""

CFG = KernelConfig((128, 128, 64), (1, 1, 1))


def build_fake(directory, problem: GemmProblem, config: KernelConfig = CFG):
    assert CC, "no C compiler (cc or gcc) on the PATH for the stand-in kernel library"
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / "fake.c"
    src.write_text(FAKE_KERNEL_C)
    flags = [f"-DA_ROW={int(problem.layout_a == 'row')}", f"-DB_ROW={int(problem.layout_b == 'row')}",
             f"-DD_ROW={int(problem.layout_c == 'row')}"]
    subprocess.run([CC, "-O2", "-shared", "-fPIC", *flags, "-o", str(directory / "kernel.so"), str(src)], check=True)
    (directory / "manifest.json").write_text(json.dumps({"problem": problem.to_dict(), "config": config.to_dict(),
                                                          "backend": "fake", "hash": "fake"}))
    return directory


@pytest.fixture
def cpu_env(monkeypatch):
    monkeypatch.setenv("CUTEGEN_RUNNER_DEVICE", "cpu")
    monkeypatch.delenv("CUTEGEN_FAKE_MODE", raising=False)
    return monkeypatch


TN = GemmProblem(136, 200, 72)
NT = GemmProblem(136, 200, 72, layout_a="col", layout_b="row", batch=2)


@pytest.mark.parametrize("problem", [TN, NT, GemmProblem(64, 96, 40, layout_c="col")])
def test_validate_passes_a_correct_kernel_and_every_probe_agrees(tmp_path, cpu_env, problem):
    k = build_fake(tmp_path / "k", problem)
    rc = V.main([str(k), "--json", str(tmp_path / "v.json"), "--timeout", "60", "-q"])
    report = json.loads((tmp_path / "v.json").read_text())
    s = report["summary"]
    assert rc == 0, json.dumps(report["kernels"][0]["cases"], indent=1)[:3000]
    assert s["pass"] == [report["kernels"][0]["kernel"]] and s["cases_run"] == 5 and s["cases_passed"] == 5
    assert s["probes"] >= 6 and s["probes_agreed"] == s["probes"]
    cases = {c["case"]: c for c in report["kernels"][0]["cases"]}
    assert cases["ragged"]["rel_err"] < 1e-2 and cases["ragged_batch2"]["batch"] == 2
    assert cases["probe_ptr_A"]["kernel_status"] == 1 and cases["probe_ptr_A"]["kernel_message"].startswith("E18")
    assert cases["probe_ptr_A"]["d_untouched"]


def test_validate_reports_a_hanging_kernel_and_goes_on(tmp_path, cpu_env):
    hang = build_fake(tmp_path / "a_hangs", TN)
    good = build_fake(tmp_path / "b_good", TN)
    cpu_env.setenv("CUTEGEN_FAKE_MODE", "hang")
    rc = V.main([str(hang), "--json", str(tmp_path / "v.json"), "--timeout", "4", "--no-probes", "-q"])
    report = json.loads((tmp_path / "v.json").read_text())
    assert rc == 1 and report["summary"]["hang"] and report["kernels"][0]["verdict"] == "hang"
    assert '"tile_shape":[128,128,64]' in report["kernels"][0]["reason"]
    # one hanging kernel does not stop the next one (same run, fresh child)
    cpu_env.delenv("CUTEGEN_FAKE_MODE")
    rc = V.main([str(good), str(tmp_path / "nothing_here"), "--json", str(tmp_path / "v2.json"), "-q"])
    report = json.loads((tmp_path / "v2.json").read_text())
    assert report["kernels"][0]["verdict"] == "pass" and report["summary"]["unusable"] == 1 and rc == 1


def test_validate_fails_a_wrong_kernel_and_one_that_does_not_refuse(tmp_path, cpu_env):
    k = build_fake(tmp_path / "k", TN)
    cpu_env.setenv("CUTEGEN_FAKE_MODE", "wrong")
    assert V.main([str(k), "--json", str(tmp_path / "w.json"), "--no-probes", "-q"]) == 1
    cases = json.loads((tmp_path / "w.json").read_text())["kernels"][0]["cases"]
    assert all(not c["ok"] and 0.05 < c["rel_err"] < 0.2 for c in cases)
    cpu_env.setenv("CUTEGEN_FAKE_MODE", "no_checks")
    assert V.main([str(k), "--json", str(tmp_path / "n.json"), "-q", "--no-manifest-shape"]) == 1
    cases = {c["case"]: c for c in json.loads((tmp_path / "n.json").read_text())["kernels"][0]["cases"]}
    assert not cases["probe_ptr_A"]["ok"] and "status 0" in cases["probe_ptr_A"]["reason"]
    assert cases["ragged"]["ok"]


def test_bench_end_to_end_writes_a_valid_results_file(tmp_path, cpu_env):
    suite = tmp_path / "suite.toml"
    suite.write_text('[[problem]]\nname = "tn"\nm = 128\nn = 128\nk = 64\n\n'
                     '[[problem]]\nname = "nt"\nm = 64\nn = 64\nk = 64\nlayout = "nt"\n\n'
                     '[[problem]]\nname = "missing"\nm = 64\nn = 64\nk = 128\n')
    problems = dict(B.load_suite(suite))
    for name in ("tn", "nt"):
        build_fake(tmp_path / "kernels" / problems[name].name, problems[name])
    build_fake(tmp_path / "baselines" / problems["tn"].name, problems["tn"],
               KernelConfig.from_dict(B.BASELINE_CONFIG))
    out = tmp_path / "results"
    rc = B.main(["--suite", str(suite), "--kernels", str(tmp_path / "kernels"), "--baselines",
                 str(tmp_path / "baselines"), "--out", str(out), "--l2-multiple", "0", "--warmup", "2", "--no-plot"])
    files = list(out.glob("*.json"))
    assert len(files) == 1 and files[0].name.endswith("-cpu-dry-run.json")
    doc = json.loads(files[0].read_text())
    assert B.check_result_doc(doc) == []
    by = {e["name"]: e for e in doc["problems"]}
    assert by["tn"]["results"]["cutegen"]["status"] == "ok" and by["tn"]["ratio_vs_cutlass"] is not None
    assert by["tn"]["results"]["cublas"]["verify"]["ok"] and len(by["tn"]["results"]["cublas"]["times_ms"]) == 50
    assert by["nt"]["results"]["cutlass_builder"]["status"] == "missing"
    assert by["missing"]["results"]["cutegen"]["status"] == "missing"
    assert doc["summary"]["not_measured"] == ["missing"] and rc == 1
    assert doc["summary"]["vs_cublas"]["n"] == 2


def test_validate_with_several_workers_keeps_every_kernel_in_order(tmp_path, cpu_env):
    dirs = [build_fake(tmp_path / f"k{i}", p) for i, p in enumerate([TN, NT, TN])]
    rc = V.main([str(d) for d in dirs] + ["--workers", "2", "--no-probes", "--json", str(tmp_path / "v.json"), "-q"])
    report = json.loads((tmp_path / "v.json").read_text())
    assert rc == 0 and [k["directory"].split("/")[-1] for k in report["kernels"]] == ["k0", "k1", "k2"]
    assert all(k["verdict"] == "pass" and len(k["cases"]) == 5 for k in report["kernels"])


def test_validate_and_bench_print_a_line_per_kernel_and_problem_in_a_log(tmp_path, cpu_env, capfd):
    # stderr is a file here, not a terminal: cutegen.progress prints one numbered line per step.
    dirs = [build_fake(tmp_path / f"k{i}", p) for i, p in enumerate([TN, NT])]
    assert V.main([str(d) for d in dirs] + ["--no-probes", "--json", str(tmp_path / "v.json")]) == 0
    err = capfd.readouterr().err.splitlines()
    assert sorted(line.split(" ")[0] for line in err if line.startswith("[")) == ["[1/2]", "[2/2]"]
    assert all(line.endswith(": pass") for line in err if line.startswith("["))
    suite = tmp_path / "suite.toml"
    suite.write_text('[[problem]]\nname = "tn"\nm = 136\nn = 200\nk = 72\n\n'
                     '[[problem]]\nname = "absent"\nm = 64\nn = 64\nk = 128\n')
    build_fake(tmp_path / "kernels" / TN.name, TN)
    B.main(["--suite", str(suite), "--kernels", str(tmp_path / "kernels"), "--baselines", str(tmp_path / "none"),
            "--out", str(tmp_path / "results"), "--l2-multiple", "0", "--warmup", "2", "--no-plot"])
    err = capfd.readouterr().err.splitlines()
    steps = [line for line in err if line.startswith("[")]
    assert steps[0].startswith("[1/2] tn: ") and steps[0].endswith("x cuBLAS")
    assert steps[1] == "[2/2] absent: no ratio to cuBLAS"
