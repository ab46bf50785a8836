"""``cutegen search``: the JSON contract, --explain, and errors that name the field."""
import json

from cutegen.cli import main
from cutegen.config import KernelConfig
from cutegen.legality import check_config
from cutegen.problem import GemmProblem


def run(capsys, *argv):
    rc = main(["search", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_has_the_contracted_keys(capsys):
    rc, out, _ = run(capsys, "--m", "2048", "--n", "2048", "--k", "2048", "--top-k", "3", "--json")
    assert rc == 0
    d = json.loads(out)
    for key in ("search_seconds", "egraph_nodes", "egraph_classes", "iterations", "candidates_legal",
                "pruned_by_rule", "ranked"):
        assert key in d, key
    assert len(d["ranked"]) == 3
    p = GemmProblem(2048, 2048, 2048)
    for item in d["ranked"]:
        cfg = KernelConfig.from_dict(item["config"])       # the schema `cutegen check config` reads
        assert check_config(p, cfg).legal
        assert isinstance(item["cost"], float) and item["cost"] > 0


def test_json_is_deterministic(capsys):
    args = ("--m", "4000", "--n", "4000", "--k", "4000", "--dtype", "e4m3", "--json")
    _, a, _ = run(capsys, *args)
    _, b, _ = run(capsys, *args)
    strip = lambda s: {k: v for k, v in json.loads(s).items() if k not in ("search_seconds", "peak_rss_mb")}  # noqa
    assert strip(a) == strip(b)


def test_explain_prints_chain_breakdown_and_runners_up(capsys):
    rc, out, _ = run(capsys, "--m", "4096", "--n", "4096", "--k", "4096", "--layout", "nt", "--explain")
    assert rc == 0
    assert "rewrite chain:" in out and "Tiled(Wgmma(64," in out and "ClusterSplit(ClTile" in out
    assert "TileToShape(GmmaAtom(MN" in out          # NT: A and B are MN-major in shared memory
    assert "cost breakdown:" in out and "predicted_us" in out
    assert "runners-up:" in out


def test_bad_input_names_the_field(capsys):
    rc, _, err = run(capsys, "--m", "0", "--n", "64", "--k", "64")
    assert rc == 2 and "problem.m" in err
    rc, _, err = run(capsys, "--m", "64", "--n", "64", "--k", "64", "--layout", "xy")
    assert rc == 2 and "layout" in err
    rc, _, err = run(capsys, "--m", "64", "--n", "64", "--k", "64", "--top-k", "0")
    assert rc == 2 and "top_k" in err
