"""The A/B/C/D tensor maps the legality rules judge are the ones CUTLASS 4.2 encodes.

oracles/smem_probe_tma.py runs the collectives' host-side to_underlying_arguments with a recording
stand-in for cuTensorMapEncodeTiled (no GPU needed); every argument must equal the model's."""
import json
from pathlib import Path

import pytest

from cutegen.collective_builder import complete
from cutegen.config import KernelConfig
from cutegen.legality import ConfigContext
from cutegen.legality.cutlass_sm90 import _tensor_map_keys, tensor_map_of
from cutegen.problem import GemmProblem

ROWS = [json.loads(l) for l in (Path(__file__).resolve().parent.parent / "oracles" /
                                "smem_probe_tma_results.jsonl").read_text().splitlines()]
CASES = [(r, op) for r in ROWS for op in sorted(r["tensor_maps"])]


def test_probe_size():
    assert len(ROWS) >= 50 and len(CASES) >= 200


@pytest.mark.parametrize("row,operand", CASES, ids=[f"{i}-{op}" for i, (_, op) in enumerate(CASES)])
def test_descriptor_matches_cutlass(row, operand):
    p, c = GemmProblem.from_dict(row["problem"]), KernelConfig.from_dict(row["config"])
    keys = _tensor_map_keys(ConfigContext(p, complete(p, c), c))
    assert set(keys) == set(row["tensor_maps"])
    m, want = tensor_map_of(*keys[operand]), row["tensor_maps"][operand]
    assert (m.data_type, list(m.global_dim), list(m.global_strides), list(m.box_dim), list(m.element_strides),
            m.interleave, m.swizzle, m.l2_promotion, m.oob_fill) == \
           (want["data_type"], want["global_dim"], want["global_strides"], want["box_dim"], want["element_strides"],
            want["interleave"], want["swizzle"], want["l2_promotion"], want["oob_fill"])
