"""Validation plans, tolerances, kernel discovery: what validate runs, decided without a GPU."""
import json

import pytest

from cutegen import FieldError, GemmProblem, KernelConfig
from cutegen.runner import (Case, KernelNotFound, case_launch_args, dim_units, discover_kernels, geometric_mean,
                            load_kernel_info, median, parse_shape, preflight, ragged_extent, refusal_probes,
                            tflops, tolerance, validation_cases)

TN = GemmProblem(4096, 4096, 4096)
NT = GemmProblem(4096, 4096, 4096, layout_a="col", layout_b="row")
FP8 = GemmProblem(4096, 4096, 4096, dtype_a="e4m3", dtype_b="e4m3", dtype_c="bf16", dtype_d="bf16")
TF32 = GemmProblem(4096, 4096, 4096, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32")
CFG = KernelConfig((128, 256, 64), (2, 1, 1))
BASES = {"A": 1 << 40, "B": 2 << 40, "C": 3 << 40, "D": 4 << 40}


# --- tolerance table ------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem,tol", [
    (TN, 1e-2), (GemmProblem(64, 64, 64, dtype_a="f16", dtype_b="f16", dtype_c="f16", dtype_d="f16"), 1e-2), (FP8, 1e-2),
    (GemmProblem(64, 64, 64, dtype_a="e5m2", dtype_b="e4m3", dtype_c="bf16", dtype_d="bf16"), 1e-2),
    (TF32, 1e-3),
    # a tf32 product rounded to bf16 at the end cannot be held to 1e-3: D's rounding counts too
    (GemmProblem(64, 64, 64, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="bf16"), 1e-2),
])
def test_tolerance_table(problem, tol):
    assert tolerance(problem) == tol


# --- units and ragged extents -------------------------------------------------------------------------
def test_units_follow_the_contiguous_modes():
    assert dim_units(TN) == {"m": 1, "n": 8, "k": 8}     # A K-major, B K-major, D N-contiguous
    assert dim_units(NT) == {"m": 8, "n": 8, "k": 1}     # A M-major, B N-major
    assert dim_units(FP8) == {"m": 1, "n": 8, "k": 16}   # fp8 inputs 16/row, bf16 D 8
    assert dim_units(TF32) == {"m": 1, "n": 4, "k": 4}
    assert dim_units(GemmProblem(64, 64, 64, layout_c="col")) == {"m": 8, "n": 1, "k": 8}


@pytest.mark.parametrize("tile,unit,whole", [(128, 1, 2), (256, 8, 1), (64, 8, 3), (64, 16, 0), (192, 8, 1)])
def test_ragged_extent_is_not_a_tile_multiple_but_is_a_unit_multiple(tile, unit, whole):
    v = ragged_extent(tile, unit, whole)
    assert v % tile != 0 and v % unit == 0 and v > whole * tile


def test_ragged_extent_falls_back_to_whole_tiles_when_no_ragged_size_exists():
    assert ragged_extent(8, 16, 2) == 16


# --- validation cases ---------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", [TN, NT, FP8, TF32, GemmProblem(4096, 4096, 4096, dtype_c="void")])
def test_cases_are_legal_ragged_batched_and_include_the_manifest_size(problem):
    cases = validation_cases(problem, CFG, [(100, 200, 64, 1)])
    names = [c.name for c in cases]
    assert names[:5] == ["manifest", "ragged", "ragged_batch2", "padded_batch3", "sub_tile"]
    assert cases[0].m == 4096 and cases[0].batch == 1
    tm, tn, tk = CFG.tile_shape
    ragged = cases[1]
    assert ragged.m % tm and ragged.n % tn and ragged.k % tk
    assert max(c.batch for c in cases) >= 2
    for c in cases[:5]:   # every planned case passes the launch contract
        assert preflight(problem, case_launch_args(problem, c, BASES)) == [], c.name
    if problem.dtype_c != "void":
        assert ragged.beta != 0.0 and ragged.alpha != 1.0
    else:
        assert all(c.beta == 0.0 for c in cases)
    padded = cases[3]
    assert padded.ld_pad and padded.batch_pad
    assert cases[-1].name == "shape_100x200x64x1"


def test_manifest_size_is_skipped_above_the_cap():
    big = GemmProblem(16384, 16384, 16384)
    assert "manifest" not in [c.name for c in validation_cases(big, CFG, max_manifest_macs=2**40)]
    assert "manifest" in [c.name for c in validation_cases(big, CFG, max_manifest_macs=2**43)]


@pytest.mark.parametrize("problem", [TN, NT, FP8, TF32, GemmProblem(4096, 4096, 4096, dtype_c="void"),
                                     GemmProblem(4096, 4096, 4096, layout_c="col")])
def test_each_probe_breaks_exactly_its_intended_rules(problem):
    probes = refusal_probes(problem, CFG)
    assert {"probe_ptr_A", "probe_ptr_D", "probe_ld_B", "probe_ld_D"} <= {p.name for p in probes}
    for p in probes:
        found = {v.rule_id for v in preflight(problem, case_launch_args(problem, p, BASES))}
        assert found == set(p.expect), (p.name, found)
    assert any(p.name == "probe_void_c_beta" for p in probes) == (problem.dtype_c == "void")


def test_case_round_trips_through_a_dict():
    c = validation_cases(TN, CFG)[3]
    assert Case.from_dict(json.loads(json.dumps(c.to_dict()))) == c


@pytest.mark.parametrize("text,expect", [("128x256x64", (128, 256, 64, 1)), ("8X8X8X3", (8, 8, 8, 3))])
def test_parse_shape(text, expect):
    assert parse_shape(text) == expect


@pytest.mark.parametrize("text", ["128x256", "axbxc", "0x8x8", "8x8x8x8x8", "-1x8x8"])
def test_parse_shape_names_the_option(text):
    with pytest.raises(FieldError) as e:
        parse_shape(text)
    assert e.value.field == "--shapes"


# --- arithmetic ----------------------------------------------------------------------------------------
def test_geometric_mean_and_tflops():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([0.9, 1.1, 1.0]) == pytest.approx((0.9 * 1.1) ** (1 / 3))
    assert geometric_mean([]) is None
    with pytest.raises(ValueError):
        geometric_mean([1.0, 0.0])
    assert tflops(2 * 8192**3, 1.375e-3) == pytest.approx(799.6, rel=1e-3)
    with pytest.raises(ValueError):
        tflops(10, 0.0)
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([4.0, 1.0, 2.0, 3.0]) == 2.5


# --- discovery ---------------------------------------------------------------------------------------
def _kernel_dir(root, name, problem=TN, config=CFG, so=True, **extra):
    d = root / name
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"problem": problem.to_dict(), "config": config.to_dict(),
                                                 "hash": "abc123", "backend": "cutlass", **extra}))
    if so:
        (d / "kernel.so").write_bytes(b"\x7fELF")
    return d


def test_discover_finds_built_kernels_and_reports_the_rest(tmp_path):
    _kernel_dir(tmp_path, "a")
    _kernel_dir(tmp_path, "b", problem=NT)
    _kernel_dir(tmp_path, "c", so=False)
    bad = tmp_path / "d"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    found, problems = discover_kernels([tmp_path])
    assert [k.directory.name for k in found] == ["a", "b"]
    assert found[1].problem == NT and found[0].config == CFG and found[0].hash == "abc123"
    reasons = dict((p.split("/")[-1], r) for p, r in problems)
    assert "no built library" in reasons["c"] and "not valid JSON" in reasons["d"]


def test_library_named_in_the_manifest_wins(tmp_path):
    d = _kernel_dir(tmp_path, "k", library="lib/other.so")
    (d / "lib").mkdir()
    (d / "lib" / "other.so").write_bytes(b"")
    assert load_kernel_info(d).library.name == "other.so"


def test_a_library_path_needs_its_manifest_beside_it(tmp_path):
    d = _kernel_dir(tmp_path, "k")
    assert load_kernel_info(d / "kernel.so").problem == TN
    (tmp_path / "lone.so").write_bytes(b"")
    with pytest.raises(KernelNotFound):
        load_kernel_info(tmp_path / "lone.so")


def test_a_bad_manifest_field_is_named(tmp_path):
    d = _kernel_dir(tmp_path, "k")
    doc = json.loads((d / "manifest.json").read_text())
    doc["config"]["tile_shape"] = [128, 0, 64]
    (d / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(FieldError) as e:
        load_kernel_info(d)
    assert "config.tile_shape" in e.value.field
