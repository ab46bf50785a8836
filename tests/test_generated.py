"""The checked-in kernels under generated/: reproducible byte for byte, consistent, and they compile."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cutegen import manifest as manifest_mod
from cutegen import render as render_mod
from cutegen.suites import load_suite

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "generated"
KERNEL_DIRS = sorted(p.parent for p in GENERATED.rglob("manifest.json"))


def test_kernels_are_checked_in():
    assert len(KERNEL_DIRS) >= 2, f"no kernels under {GENERATED} (cutegen regen writes them)"


@pytest.mark.parametrize("directory", KERNEL_DIRS, ids=[str(d.relative_to(GENERATED)) for d in KERNEL_DIRS])
def test_checked_in_kernel_is_consistent(directory):
    m = manifest_mod.load(directory)
    source = (directory / "kernel.cu").read_text()
    assert m.data["files"]["kernel.cu"]["sha256"] == hashlib.sha256(source.encode()).hexdigest()
    assert m.kernel_hash == manifest_mod.kernel_hash(m.problem, m.config, m.backend)
    assert m.legal is True
    assert f"cutegen_{m.kernel_hash}" in source
    expected_parent = "baseline" if m.backend == "cutlass_builder" else None
    rel = directory.relative_to(GENERATED).parts
    assert rel[-1] == m.problem.name and rel[-2] == m.problem.target
    assert ("baseline" in rel[:-2]) == (expected_parent == "baseline")


@pytest.mark.parametrize("directory", KERNEL_DIRS, ids=[str(d.relative_to(GENERATED)) for d in KERNEL_DIRS])
def test_checked_in_kernel_re_renders_to_the_same_bytes(directory):
    """Rendering from the stored (problem, config) gives the checked-in bytes: no drift in templates,
    legality verdicts or the manifest (the toolchain it records is kept as stored)."""
    again = render_mod.render_manifest(directory, keep_toolchain=True)
    assert again.differences(directory) == []


SUITE = ROOT / "bench" / "suite.toml"


def test_every_suite_problem_has_a_checked_in_kernel():
    missing = [name for name, p in load_suite(SUITE) if not (GENERATED / p.target / p.name / "kernel.cu").is_file()]
    assert missing == []


@pytest.mark.compile
def test_two_checked_in_kernels_compile():
    """CI compiles at least two checked-in kernels (the default cache makes repeats cheap: a hit means
    this exact source, flags and toolchain compiled before)."""
    from cutegen import build as build_mod
    if build_mod.find_nvcc() is None:
        pytest.skip("nvcc not found")
    picked, dtypes = [], set()
    for d in KERNEL_DIRS:  # two explicit kernels of different input types where the suite has them
        man = json.loads((d / "manifest.json").read_text())
        if man["backend"] == "cutlass" and man["problem"]["dtype_a"] not in dtypes:
            picked.append(d)
            dtypes.add(man["problem"]["dtype_a"])
    if len(picked) < 2:
        picked = [d for d in KERNEL_DIRS
                  if json.loads((d / "manifest.json").read_text())["backend"] == "cutlass"][:2]
    picked = picked[:2]
    had = {d for d in picked if (d / "kernel.so").exists()}
    summary = build_mod.build(picked, jobs=1, progress=None)
    assert summary.ok, "\n".join(r.message for r in summary.results if not r.ok)
    for r in summary.results:
        # A missing statistic is a failure too: the build must have counted the WGMMAs it kept.
        assert r.stats["ptx_wgmma_mma_async"] > 0, r.stats
    for d in set(picked) - had:
        (d / "kernel.so").unlink()  # leave the tree as found; the library stays in the cache


@pytest.mark.parametrize("suite,out", [("bench/suite.toml", "generated"),
                                       ("bench/coverage.toml", "generated/coverage"),
                                       ("bench/llm.toml", "generated/llm"),
                                       ("bench/forms_splitk.toml", "generated/forms"),
                                       ("bench/unaligned.toml", "generated/unaligned"),
                                       ("bench/layouts.toml", "generated/layouts")])
def test_regen_check_finds_no_drift(suite, out, monkeypatch):
    """What CI jobs run: search and render every suite problem again; not one byte may change."""
    from cutegen.cli import main
    monkeypatch.chdir(ROOT)
    assert main(["regen", "--check", "--suite", suite, "--out", out]) == 0
