"""DSL-PIPELINE-MATCH (cutegen/dsl_pipeline.py): the pipeline read back from the freshly rendered DSL kernel is
the term the pipeline checker proves, and mutations of the rendered text are caught, both as a difference
from the verified term and, where the mutant's own term is explored, by the pipeline rule it breaks."""
from __future__ import annotations

import pytest

from cutegen import GemmProblem, KernelConfig, dsl
from cutegen.dsl_pipeline import RULE, check_rendered, first_difference, read_back
from cutegen.errors import CutegenError
from cutegen.legality.pipeline import Bounds, check_pipeline
from cutegen.pipelines import pipeline_of
from cutegen.render import complete_config

BF16 = GemmProblem(m=4096, n=4096, k=4096)


def config(**kw):
    base = dict(tile_shape=(128, 256, 64), cluster_shape=(1, 2, 1))
    base.update(kw)
    return complete_config(BF16, KernelConfig(**base))


PINGPONG = dict(tile_shape=(128, 128, 64), cluster_shape=(1, 1, 1), mainloop_schedule="pingpong",
                epilogue_schedule="tma_warp_specialized")
COOPERATIVE = dict(tile_shape=(128, 256, 64), cluster_shape=(1, 1, 1))
KERNELS = {
    "pingpong": PINGPONG,
    "pingpong 1x2": dict(PINGPONG, cluster_shape=(1, 2, 1)),
    "pingpong after release": dict(PINGPONG, pingpong_order="after_release"),
    "cooperative": COOPERATIVE,
    "cooperative 2x1": dict(COOPERATIVE, cluster_shape=(2, 1, 1)),
    "cooperative 2x2": dict(COOPERATIVE, tile_shape=(128, 128, 64), cluster_shape=(2, 2, 1)),
    "cooperative prefetch 2, lag 0": dict(COOPERATIVE, prefetch_distance=2, release_lag=0),
    "cooperative no-smem epilogue": dict(COOPERATIVE, epilogue_schedule="no_smem"),
    "warp-specialized": dict(tile_shape=(64, 128, 64), cluster_shape=(1, 1, 1), mainloop_schedule="warp_specialized",
                             epilogue_schedule="tma_warp_specialized"),
}


def fresh(cfg):
    """The template rendered now, before any check (what render_dsl checks)."""
    return dsl._environment().get_template(dsl.TEMPLATE).render(**dsl.template_context(BF16, cfg))


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_rendered_kernels_are_the_verified_term(name):
    cfg = config(**KERNELS[name])
    source = fresh(cfg)
    assert check_rendered(source, BF16, cfg) == []
    # and not trivially: the read-back has every role's protocol ops
    term, rebuild = pipeline_of(BF16, cfg, "dsl", explore_cluster=True)
    back = read_back(source, tiles=term.meta["tiles"], k_blocks=3)
    assert first_difference(rebuild(stages=term.stages, k_blocks=3), back) is None
    assert all(len(r.ops) > 4 for r in back.roles)
    assert back.ctas == cfg.cluster_shape[0] * cfg.cluster_shape[1]


def mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, f"the template no longer contains {old!r}: update the mutation"
    return text.replace(old, new)


def swap_lines(text: str, first: str, second: str) -> str:
    lines = text.split("\n")
    i = next(n for n, line in enumerate(lines) if line.strip() == first and lines[n + 1].strip() == second)
    indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
    lines[i], lines[i + 1] = indent + second, indent + first
    return "\n".join(lines)


# (name, kernel, mutation of the rendered text, what the difference names, the rule the mutant's term breaks)
MUTATIONS = [
    ("drop the ping-pong order wait", "pingpong",
     lambda t: mutate(t, "                wg_order.wait(order_state)\n", ""),
     "`wait order", "PIPE-ORDER-EXCLUSIVE"),
    ("release a stage before wait_group(1)", "cooperative",
     lambda t: swap_lines(t, "cute.nvgpu.warpgroup.wait_group(1)", "mainloop.consumer_release(release_state)"),
     "wgmma.wait_group 1", "PIPE-RELEASE-BEFORE-MMA-DONE"),
    ("consumer arrival count from threads, not warps", "cooperative",
     lambda t: mutate(t, "mcast_peers * (TILE_THREADS // 32)", "mcast_peers * TILE_THREADS"),
     "mbarrier.init count 8, the rendered kernel mbarrier.init count 256", "PIPE-ARRIVAL-COUNT"),
    ("consumer state starts on the producer's parity", "cooperative",
     lambda t: mutate(t, "read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer",
                      "read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer"),
     "parity 0", "PIPE-PHASE-ALTERNATION"),
    ("ordering state on the swapped parity", "pingpong",
     lambda t: mutate(t, "cutlass.Int32(1) - order_group)", "cutlass.Int32(0) + order_group)"),
     "wait order0@0 parity 1", "PIPE-PHASE-ALTERNATION"),
    ("missing expect-tx (the producer waits but does not arm)", "cooperative",
     lambda t: mutate(t, "mainloop.producer_acquire(state)",
                      "mainloop.sync_object_empty.wait(state.index, state.phase)"),
     "expect_tx", "PIPE-TX-BYTES"),
    ("wrong tx bytes (A only)", "cooperative",
     lambda t: mutate(t, "tx_count=tx_bytes,", "tx_count=cute.size_in_bytes(A_DTYPE, cute.slice_(sa_staged, (None, None, 0))),"),
     "expect_tx 16384 B", "PIPE-TX-BYTES"),
    ("no producer tail", "cooperative 2x1",
     lambda t: mutate(t, "                mainloop.producer_tail(state)\n", ""),
     "producer@0", "PIPE-ARRIVE-AFTER-EXIT"),
    ("the ordering state not carried across tiles (DSL-LOOP-STATE)", "pingpong",
     lambda t: mutate(t, "order_state = wg_order.arrive(order_state)   # hand the mainloop",
                      "wg_order.arrive(order_state)   # hand the mainloop"),
     "wait order0@0 parity", "PIPE-PHASE-ALTERNATION"),
    ("WGMMA reads the stage being released", "cooperative",
     lambda t: mutate(t, "kc = (None, None, kb, read_state.index)", "kc = (None, None, kb, release_state.index)"),
     "WGMMA reads", "PIPE-RELEASE-BEFORE-MMA-DONE"),
    ("stage loaded on another stage's barrier", "cooperative",
     lambda t: mutate(t, "tAsA[(None, state.index)]", "tAsA[(None, (state.index + 1) % AB_STAGES)]"),
     "TMA load A", None),
]


@pytest.mark.parametrize("name,kernel,edit,names,rule", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutations_of_the_rendered_kernel_are_caught(name, kernel, edit, names, rule):
    cfg = config(**KERNELS[kernel])
    source = fresh(cfg)
    assert check_rendered(source, BF16, cfg) == []              # the unmutated rendering passes
    mutant = edit(source)
    assert mutant != source
    found = check_rendered(mutant, BF16, cfg)
    assert found and found[0].startswith(RULE + ":"), found
    assert names in found[0], found[0]
    if rule is not None:
        # The mutant's own pipeline, explored: the rule it breaks on the machine.
        # (A cluster's every interleaving is explored over one tile of one k-tile.)
        term, _ = pipeline_of(BF16, cfg, "dsl", explore_cluster=True)
        one_cta = term.ctas == 1
        back = read_back(mutant, tiles=min(3, term.meta["tiles"]) if one_cta else 1, k_blocks=2 if one_cta else 1)
        report = check_pipeline(back, bounds=Bounds(stages=None, max_states=400_000))
        assert rule in {v.rule_id for v in report.violations}, [str(v) for v in report.violations]


def test_rendering_refuses_a_mutated_template(monkeypatch):
    cfg = config(**PINGPONG)
    real = dsl._environment

    class Env:
        def __init__(self):
            self.env = real()

        def get_template(self, name):
            template = self.env.get_template(name)

            class T:
                def render(self, **ctx):
                    return template.render(**ctx).replace("                wg_order.wait(order_state)\n", "")
            return T()

    assert "wg_order.wait(order_state)" in dsl.render_dsl(BF16, cfg)
    monkeypatch.setattr(dsl, "_environment", Env)
    with pytest.raises(CutegenError, match=RULE):
        dsl.render_dsl(BF16, cfg)
    with pytest.raises(CutegenError, match=RULE):
        dsl.render_files(BF16, cfg, check_legality=False)


def test_unreadable_pipeline_is_a_failure_not_a_pass():
    cfg = config(**COOPERATIVE)
    mutant = mutate(fresh(cfg), "                    if k_tile > 0:\n",
                    "                    if alpha > k_tile:\n")
    found = check_rendered(mutant, BF16, cfg)
    assert found and "cannot be read back" in found[0] and "alpha > k_tile" in found[0]
