"""Replay the committed H100 oracle sweep through the rules: `legal` must equal the driver's
answer on every single case.

The driver's answer is the C API call (`c_api`: every array a valid pointer, as a C or C++
caller has it). The cuda-python binding differs only where it hands the driver a NULL pointer
(rank-1 maps, empty globalStrides); that is checked separately below.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from cutegen.errors import FieldError
from cutegen.legality.tensor_map import TensorMap, check_tensor_map

DATA = Path(__file__).resolve().parent / "data"
# tensor_map_oracle_<chip>.jsonl.gz (sweep 1), tensor_map_oracle_2_<chip>.jsonl.gz (sweep 2);
# a symlink to another file is the same data, read once.
SWEEPS = sorted({p.resolve() for p in DATA.glob("tensor_map_oracle*.jsonl*")})


def load(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        recs = [json.loads(line) for line in f]
    meta = recs[0]["meta"]
    return meta, recs[1:]


@pytest.fixture(scope="module", params=SWEEPS, ids=[p.name for p in SWEEPS])
def sweep(request):
    return load(request.param)


if not SWEEPS:
    pytest.skip("no oracle data under tests/data (tensor_map_oracle*.jsonl[.gz])",
                allow_module_level=True)


def test_sweep_was_taken_on_hopper(sweep):
    meta, recs = sweep
    assert meta["compute_capability"] == "9.0"
    assert "H100" in meta["device"] or "H200" in meta["device"] or "H800" in meta["device"]
    assert len(recs) >= 1000
    assert not [r["case"] for r in recs if str(r.get("c_api", "")).startswith("CRASHED")]


def test_legal_agrees_with_the_driver_on_every_case(sweep):
    meta, recs = sweep
    disagree = []
    checked = 0
    for r in recs:
        answer = r["c_api"]
        if answer.startswith("SKIPPED"):
            # A value the C call cannot even carry: the parser must refuse it too.
            with pytest.raises(FieldError):
                TensorMap.from_dict(r["input"])
            continue
        assert answer.startswith("CUDA_"), (r["case"], answer)
        vs = check_tensor_map(TensorMap.from_dict(r["input"]))
        legal = not any(v.enforced for v in vs)
        checked += 1
        if legal != (answer == "CUDA_SUCCESS"):
            disagree.append((r["case"], answer, [str(v) for v in vs]))
    assert checked >= 0.99 * len(recs)
    assert disagree == [], f"{len(disagree)} of {checked} disagree, first: {disagree[:5]}"


def test_only_success_and_invalid_value_come_back(sweep):
    _, recs = sweep
    assert {r["c_api"] for r in recs if r["c_api"].startswith("CUDA_")} <= {"CUDA_SUCCESS",
                                                                          "CUDA_ERROR_INVALID_VALUE"}


def test_binding_differs_from_c_only_by_the_null_stride_pointer(sweep):
    """cuda-python passes NULL for an empty list; the driver rejects a NULL globalStrides even
    for rank 1, where it has no stride to read. With one dummy stride the binding agrees."""
    _, recs = sweep
    for r in recs:
        c, b = r["c_api"], r.get("binding", "")
        if not c.startswith("CUDA_") or not b.startswith("CUDA_"):
            continue
        null_strides = r["input"]["rank"] == 1 or not r["input"]["global_strides"]
        if null_strides and c == "CUDA_SUCCESS":
            assert b == "CUDA_ERROR_INVALID_VALUE", r["case"]
            if "binding_dummy_stride" in r:
                assert r["binding_dummy_stride"] == "CUDA_SUCCESS", r["case"]
        elif not null_strides:
            assert b == c, (r["case"], b, c)


def test_the_driver_does_not_look_at_the_allocation(sweep):
    """Moving the address into a real allocation (same offset mod 1024) changes the answer only
    for addresses past the largest the driver takes: the encode call checks the address's
    alignment and range, not whether memory is mapped there (0 is accepted)."""
    from cutegen.legality.tensor_map import GLOBAL_ADDRESS_LIMIT
    _, recs = sweep
    diffs = [r for r in recs
             if r["c_api"].startswith("CUDA_") and r.get("c_api_alloc", r["c_api"]) != r["c_api"]]
    assert all(r["input"]["global_address"] >= GLOBAL_ADDRESS_LIMIT and r["c_api_alloc"] == "CUDA_SUCCESS"
               for r in diffs)
    null = [r for r in recs if r["c_api"].startswith("CUDA_") and r["input"]["global_address"] == 0]
    assert any(r["c_api"] == "CUDA_SUCCESS" for r in null) or not null


def test_box_limit_is_where_the_data_puts_it(sweep):
    """Among maps that break no other enforced rule, the driver accepts exactly those whose
    floor-counted box bytes are at most 228 KiB."""
    from cutegen.legality.tensor_map import SMEM_BOX_LIMIT_BYTES, box_bytes_floor
    _, recs = sweep
    accepted, rejected = [], []
    for r in recs:
        if not r["c_api"].startswith("CUDA_"):
            continue
        tm = TensorMap.from_dict(r["input"])
        others = [v for v in check_tensor_map(tm) if v.enforced and v.rule_id != "TMA-BOX-SMEM-BYTES"]
        if others:
            continue
        (accepted if r["c_api"] == "CUDA_SUCCESS" else rejected).append(box_bytes_floor(tm))
    assert SMEM_BOX_LIMIT_BYTES == 233472
    assert max(accepted) <= SMEM_BOX_LIMIT_BYTES
    if rejected:
        assert min(rejected) > SMEM_BOX_LIMIT_BYTES
