"""GemmProblem and KernelConfig: validation names the field, JSON round-trips, hashes are stable."""
import json

import pytest

from cutegen import FieldError, GemmProblem, KernelConfig, SmemAtom


def test_problem_defaults_are_bf16_tn_row_output_with_16_byte_alignment():
    p = GemmProblem(4096, 4096, 4096)
    assert (p.dtype_a, p.dtype_b, p.dtype_d, p.dtype_acc) == ("bf16", "bf16", "bf16", "f32")
    assert p.blas_layout == "tn" and p.a_k_major and p.b_k_major
    assert (p.alignment_a, p.alignment_b, p.alignment_c) == (8, 8, 8)
    assert GemmProblem(64, 64, 64, dtype_a="e4m3", dtype_b="e4m3").alignment_a == 16
    assert GemmProblem(64, 64, 64, dtype_a="tf32", dtype_b="tf32", dtype_c="f32", dtype_d="f32").alignment_a == 4


@pytest.mark.parametrize("field,value", [
    ("m", 0), ("n", -3), ("k", "64"), ("batch", 0), ("dtype_a", "fp64"), ("dtype_acc", "f16"),
    ("layout_a", "t"), ("activation", "tanh"), ("alignment_a", 3), ("target", "sm90"), ("m", True),
])
def test_problem_rejects_bad_field_by_name(field, value):
    base = dict(m=128, n=128, k=128)
    base[field] = value
    with pytest.raises(FieldError) as e:
        GemmProblem(**base)
    assert e.value.field == field


def test_problem_void_c_requires_zero_beta():
    with pytest.raises(FieldError) as e:
        GemmProblem(64, 64, 64, dtype_c="void", beta=1.0)
    assert e.value.field == "beta"
    assert GemmProblem(64, 64, 64, dtype_c="void").dtype_c == "void"


def test_problem_from_dict_blas_layout_and_dtype_shorthands():
    p = GemmProblem.from_dict({"m": 8, "n": 16, "k": 32, "layout": "nt", "dtype": "f16"})
    assert (p.layout_a, p.layout_b, p.dtype_a, p.dtype_d) == ("col", "row", "f16", "f16")
    assert p.blas_layout == "nt"
    p8 = GemmProblem.from_dict({"m": 8, "n": 16, "k": 32, "dtype": "e4m3"})
    assert (p8.dtype_a, p8.dtype_b, p8.dtype_d) == ("e4m3", "e4m3", "bf16")


def test_problem_from_dict_names_missing_and_unknown_fields():
    with pytest.raises(FieldError) as e:
        GemmProblem.from_dict({"m": 8, "n": 16})
    assert e.value.field == "problem.k"
    with pytest.raises(FieldError) as e:
        GemmProblem.from_dict({"m": 8, "n": 16, "k": 4, "mm": 3})
    assert e.value.field == "problem.mm"
    with pytest.raises(FieldError) as e:
        GemmProblem.from_dict({"m": 8, "n": "x", "k": 4})
    assert e.value.field == "problem.n"


def test_problem_roundtrip_and_name_distinguishes_problems():
    p = GemmProblem(1000, 2000, 3000, batch=2, layout_a="col", layout_b="row", beta=0.5)
    assert GemmProblem.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    names = {GemmProblem(4096, 4096, 4096).name, GemmProblem(4096, 4096, 4096, layout_a="col").name,
             GemmProblem(4096, 4096, 4096, batch=2).name, GemmProblem(4096, 4096, 4096, dtype_d="f32").name}
    assert len(names) == 4


def test_config_json_roundtrip_and_hash_stability():
    c = KernelConfig((128, 256, 64), (2, 1, 1), stages=4, smem_layout_a="K_SW128",
                     smem_layout_b={"major": "K", "swizzle": "SW64"}, tma_a="tma", tma_b="tma_multicast",
                     mma_instruction=(64, 256, 16), warpgroup_layout=(2, 1, 1), epilogue_tile=(128, 32))
    d = json.loads(c.to_json())
    assert d["smem_layout_a"] == "K_SW128" and d["smem_layout_b"] == "K_SW64"
    c2 = KernelConfig.from_dict(d)
    assert c2 == c and c2.hash == c.hash and c2.is_complete
    assert c.replace(stages=5).hash != c.hash
    assert KernelConfig((128, 128, 64)).hash == KernelConfig.from_dict({"tile_shape": "128x128x64"}).hash


@pytest.mark.parametrize("field,value", [
    ("tile_shape", (128, 128)), ("tile_shape", (0, 128, 64)), ("cluster_shape", "2x1"),
    ("stages", 0), ("stages", "many"), ("mainloop_schedule", "coop"), ("epilogue_schedule", "tma"),
    ("tile_scheduler", "split_k"), ("smem_layout_a", "SW128"), ("smem_layout_b", "K_SW256"),
    ("tma_a", "multicast"), ("raster_order", "diagonal"), ("raster_swizzle", 3),
])
def test_config_rejects_bad_field_by_name(field, value):
    data = {"tile_shape": [128, 128, 64], field: value}
    with pytest.raises(FieldError) as e:
        KernelConfig.from_dict(data)
    assert e.value.field.startswith(f"config.{field}")


def test_smem_atom_geometry_matches_cute_gmma_atoms():
    # cute/atom/mma_traits_sm90_gmma.hpp: K-major SW128 for 16-bit is 8x64, MN-major SW128 is 64x8.
    assert SmemAtom("K", "SW128").shape(16) == (8, 64)
    assert SmemAtom("MN", "SW128").shape(16) == (64, 8)
    assert SmemAtom("K", "SW32").shape(8) == (8, 32)
    assert SmemAtom("K", "INTER").shape(32) == (8, 4)


def test_kernel_key_leaves_sizes_and_scalars_out():
    a = GemmProblem(4096, 4096, 4096)
    b = GemmProblem(128, 8192, 1000, batch=3, alpha=2.0, beta=0.5)
    assert a.kernel_key() == b.kernel_key() and a.kernel_class_name == b.kernel_class_name == "bf16_tn_cbf16dbf16"
    assert a.kernel_key() != GemmProblem(4096, 4096, 4096, layout_b="row").kernel_key()
    assert a.kernel_key() != GemmProblem(4096, 4096, 4096, alignment_a=4).kernel_key()


def test_same_config_for_two_sizes_is_one_kernel():
    from cutegen.manifest import kernel_hash
    cfg = KernelConfig((128, 256, 64), (2, 1, 1))
    assert kernel_hash(GemmProblem(4096, 4096, 4096), cfg, "cutlass") == \
        kernel_hash(GemmProblem(1000, 2000, 3000, batch=2), cfg, "cutlass")
    assert kernel_hash(GemmProblem(4096, 4096, 4096), cfg, "cutlass") != \
        kernel_hash(GemmProblem(4096, 4096, 4096, dtype_d="f32"), cfg, "cutlass")
