"""Reach: every kernel CUTLASS 4.2's generator emits at instantiation level max is either a term
the search's e-graph reaches or rejected by a named rule; and configurations it does not emit
are reachable too (see tests/test_search.py::test_configurations_catalogs_do_not_emit_are_reachable).
"""
import json

import pytest

pytest.importorskip("cutlass_library")

from cutegen.search.catalog import catalog, coverage


@pytest.fixture(scope="module")
def bf16_tn():
    return catalog("bf16", "tn")


def test_generator_emits_the_documented_count(bf16_tn):
    # 1,875 kernels for bf16 in, f32 accumulate, bf16 C and D, TN, 16-byte aligned (peers.md §2.1)
    assert sum(k.problem.dtype_c == "bf16" for k in bf16_tn) == 1875
    assert len({(k.config.tile_shape, k.config.cluster_shape) for k in bf16_tn}) == 293
    assert len({k.config.tile_shape for k in bf16_tn}) == 32


def test_every_catalog_kernel_is_reachable_or_rejected_by_a_rule(bf16_tn):
    with_c = [k for k in bf16_tn if k.problem.dtype_c == "bf16"]
    cov = coverage(with_c)
    print("\ncatalog coverage bf16 TN (C=bf16):", json.dumps({k: v for k, v in cov.items() if k != "missing_names"},
                                                             sort_keys=True))
    assert cov["missing"] == 0, cov["missing_names"][:10]
    assert cov["reachable"] + cov["rejected"] == 1875
    assert cov["materialised"] == cov["distinct_reachable_configs"] > 0
    assert cov["reachable"] > 500 and cov["rejected"] > 0
    assert all(rule and count > 0 for rule, count in cov["rejected_by_rule"].items())


def test_void_c_and_nt_catalogs_too():
    kerns = [k for k in catalog("bf16", "nt") if k.problem.dtype_c == "void"]
    cov = coverage(kerns)
    print("\ncatalog coverage bf16 NT (C=void):", json.dumps({k: v for k, v in cov.items() if k != "missing_names"},
                                                             sort_keys=True))
    assert cov["missing"] == 0, cov["missing_names"][:10]
    assert cov["reachable"] + cov["rejected"] == len(kerns) > 1000


def test_fp8_catalog_too():
    kerns = [k for k in catalog("e4m3", "tn") if k.problem.dtype_c == "bf16"]
    cov = coverage(kerns)
    print("\ncatalog coverage e4m3 TN (C=bf16):", json.dumps({k: v for k, v in cov.items() if k != "missing_names"},
                                                             sort_keys=True))
    assert cov["missing"] == 0, cov["missing_names"][:10]
    assert cov["reachable"] + cov["rejected"] == len(kerns) > 1000
