"""The runner's host path (CUTEGEN_RUNNER_DEVICE=cpu, numpy; cutegen/_runner_host.py) on a staged kernel:
the workspace the runner allocates is the one the library reports, and it holds the staged copies.

A small C library stands in for a staged bf16 TN kernel (cutegen/staging.py, templates/cutegen_abi.inc.j2):
``cutegen_workspace_size`` reports the copies of A and B (leading dimension K rounded up to 8 elements,
every batch, each padded to 256 B), ``cutegen_gemm`` refuses a smaller workspace with STAGE-WORKSPACE
(status 2), copies A and B into it row by row from any leading dimension, batch stride and element
offset (what cudaMemcpy2DAsync does on the GPU) and computes from the copies. CUTEGEN_FAKE_MODE=short
makes ``cutegen_workspace_size`` report 256 bytes too few: every case must then fail.
"""
import json
import shutil
import subprocess

import pytest

from cutegen import GemmProblem, KernelConfig
from cutegen import staging as S
from cutegen.commands import validate as V

CC = shutil.which("cc") or shutil.which("gcc")

FAKE_STAGED_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char last_error[512];
static int fail(int status, const char* msg) { snprintf(last_error, sizeof last_error, "%s", msg); return status; }
static float ld_bf16(const uint16_t* p) { uint32_t u = (uint32_t)(*p) << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7FFF + ((u >> 16) & 1); return (uint16_t)(u >> 16); }
static int64_t sld(int64_t k) { return (k + 7) / 8 * 8; }
static size_t region(int64_t rows, int64_t k, int64_t batch) { size_t b = (size_t)(sld(k) * rows * batch * 2); return (b + 255) / 256 * 256; }

size_t cutegen_workspace_size(int64_t M, int64_t N, int64_t K, int64_t batch) {
  const char* mode = getenv("CUTEGEN_FAKE_MODE");
  size_t need = region(M, K, batch) + region(N, K, batch);
  return (mode && strcmp(mode, "short") == 0) ? need - 256 : need;
}

/* copy a rows x K operand (K contiguous) at ld / batch stride bs into dst at the staged pitch */
static void stage(uint16_t* dst, const uint16_t* src, int64_t rows, int64_t K, int64_t ld, int64_t batch, int64_t bs) {
  for (int64_t l = 0; l < batch; ++l)
    for (int64_t r = 0; r < rows; ++r)
      memcpy(dst + (l * rows + r) * sld(K), src + l * bs + r * ld, (size_t)K * 2);
}

int cutegen_gemm(const void* A, const void* Bm, const void* C, void* D, int64_t M, int64_t N, int64_t K,
                 int64_t batch, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd, int64_t bsa, int64_t bsb,
                 int64_t bsc, int64_t bsd, float alpha, float beta, const void* bias, void* ws, size_t wsb,
                 void* stream) {
  static char msg[256];
  if (M < 1 || N < 1 || K < 1 || batch < 1) return fail(1, "ABI-EXTENT: bad extents");
  if (!A || !Bm || !D) return fail(1, "ABI-NULL: A, B or D is NULL");
  if (beta != 0.0f && !C) return fail(1, "ABI-NULL: C is NULL but beta is not 0");
  if (lda < K || ldb < K) return fail(1, "A10: A or B leading dimension below K");
  if (batch > 1 && (bsa < lda * M || bsb < ldb * N)) return fail(1, "A10: A or B batches overlap");
  size_t need = region(M, K, batch) + region(N, K, batch);
  if (!ws || wsb < need) {
    snprintf(msg, sizeof msg, "STAGE-WORKSPACE: workspace of %zu bytes is smaller than the %zu bytes the staged copies of A and B need", wsb, need);
    return fail(2, msg);
  }
  /* D (and C): 16-byte rows, as the TMA epilogue of the real kernel */
  if (((uintptr_t)D) % 16 || (C && ((uintptr_t)C) % 16)) return fail(1, "E18: C or D pointer is not 16-byte aligned");
  if (N % 8 || ldd % 8 || (batch > 1 && bsd % 8)) return fail(1, "E16: D not 16-byte aligned");
  if (C && (ldc % 8 || (batch > 1 && bsc % 8))) return fail(1, "E16: C not 16-byte aligned");
  uint16_t* a = (uint16_t*)ws;
  uint16_t* b = (uint16_t*)((char*)ws + region(M, K, batch));
  stage(a, A, M, K, lda, batch, batch > 1 ? bsa : lda * M);
  stage(b, Bm, N, K, ldb, batch, batch > 1 ? bsb : ldb * N);
  const uint16_t* c = C; uint16_t* d = D;
  for (int64_t l = 0; l < batch; ++l)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k)
          acc += ld_bf16(a + (l * M + m) * sld(K) + k) * ld_bf16(b + (l * N + n) * sld(K) + k);
        float out = alpha * acc;
        if (c && beta != 0.0f) out += beta * ld_bf16(c + l * bsc + m * ldc + n);
        d[l * bsd + m * ldd + n] = to_bf16(out);
      }
  last_error[0] = 0;
  return 0;
}
const char* cutegen_describe(void) { return "{\"backend\": \"fake\", \"staged_operands\": \"A,B\"}"; }
const char* cutegen_last_error(void) { return last_error; }
"""

PROBLEM = GemmProblem(136, 200, 71)          # bf16 TN, K odd: A and B rows 2-byte aligned
CFG = KernelConfig((128, 128, 64), (1, 1, 1), stage_a=True, stage_b=True)


def build_fake(directory):
    assert CC, "no C compiler (cc or gcc) on the PATH for the stand-in kernel library"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fake.c").write_text(FAKE_STAGED_C)
    subprocess.run([CC, "-O2", "-shared", "-fPIC", "-o", str(directory / "kernel.so"), str(directory / "fake.c")],
                   check=True)
    (directory / "manifest.json").write_text(json.dumps({"problem": PROBLEM.to_dict(), "config": CFG.to_dict(),
                                                          "backend": "fake", "hash": "fake"}))
    return directory


@pytest.fixture
def cpu_env(monkeypatch):
    monkeypatch.setenv("CUTEGEN_RUNNER_DEVICE", "cpu")
    monkeypatch.delenv("CUTEGEN_FAKE_MODE", raising=False)
    return monkeypatch


def test_the_runner_allocates_the_staged_copies_the_library_reports(tmp_path, cpu_env):
    assert PROBLEM.alignment_a == PROBLEM.alignment_b == 1
    k = build_fake(tmp_path / "k")
    rc = V.main([str(k), "--json", str(tmp_path / "v.json"), "--timeout", "60", "-q"])
    report = json.loads((tmp_path / "v.json").read_text())
    cases = report["kernels"][0]["cases"]
    assert rc == 0, json.dumps(cases, indent=1)[:3000]
    runs = [c for c in cases if not c["case"].startswith("probe_")]
    assert {c["case"] for c in runs} >= {"ragged", "padded_batch3", "unaligned_ld"}
    for c in runs:
        p = PROBLEM.replace(m=c["m"], n=c["n"], k=c["k"], batch=c["batch"], lda=0, ldb=0, ldc=0,
                            alignment_a=0, alignment_b=0, alignment_c=0)
        # the bytes the runner passed are exactly the staged copies cutegen.staging accounts for
        assert c["workspace_bytes"] == S.staging_workspace_bytes(p, CFG), c["case"]
        assert c["ok"] and c["rel_err"] < 1e-2


def test_a_short_workspace_is_refused_by_the_staging_rule(tmp_path, cpu_env):
    k = build_fake(tmp_path / "k")
    cpu_env.setenv("CUTEGEN_FAKE_MODE", "short")
    rc = V.main([str(k), "--json", str(tmp_path / "v.json"), "--no-probes", "-q"])
    cases = json.loads((tmp_path / "v.json").read_text())["kernels"][0]["cases"]
    assert rc == 1 and cases and all(not c["ok"] for c in cases)
    assert all("STAGE-WORKSPACE" in (c.get("kernel_message") or c.get("reason") or "") for c in cases), cases[0]
