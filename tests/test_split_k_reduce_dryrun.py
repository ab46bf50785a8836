"""validate of a split-K-reduce kernel end to end on the CPU (the runner's host twin and the stand-in library of
tests/test_runner_dryrun.py): every case the form adds reaches the library past the preflight, which judges the
sliced configuration at each case's size, and checks out; the relaunch case launches 20 times."""
import json

from test_runner_dryrun import build_fake, cpu_env  # noqa: F401  (same folder; the fixture is used by name)

from cutegen import GemmProblem, KernelConfig
from cutegen.commands import validate as V

SLICED = KernelConfig((128, 64, 64), (1, 2, 1), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized",
                      split_k_slices=4)


def test_every_case_of_the_form_runs_and_validates(tmp_path, cpu_env):  # noqa: F811
    k = build_fake(tmp_path / "k", GemmProblem(200, 248, 4096), SLICED)
    rc = V.main([str(k), "--json", str(tmp_path / "v.json"), "--timeout", "120", "-q", "--no-probes"])
    report = json.loads((tmp_path / "v.json").read_text())
    cases = {c["case"]: c for c in report["kernels"][0]["cases"]}
    assert rc == 0, json.dumps(cases, indent=1)[:3000]
    assert {"manifest", "ragged", "ragged_batch2", "padded_batch3", "sub_tile", "slices_whole_kblocks",
            "relaunch_slices"} <= set(cases)
    for c in cases.values():
        assert c["ok"] and c["k"] % 4 == 0, c
    assert cases["relaunch_slices"]["launches"] == 20 and cases["relaunch_slices"]["beta"] == 0.5
