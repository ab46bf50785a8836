"""DSL-LOOP-STATE (cutegen/dsl_lint.py): a call that mutates an argument inside a loop must assign it back."""
import pytest

from cutegen import dsl
from cutegen.dsl_lint import loop_state_violations
from cutegen.errors import CutegenError

ORDERED = """
while work.is_valid_tile:
    order.wait(state)
    state = order.arrive(state)
"""


def test_assigned_back_is_clean():
    assert loop_state_violations(ORDERED) == []


def test_statement_call_in_a_loop_is_flagged_with_its_line():
    bad = ORDERED.replace("state = order.arrive(state)", "order.arrive(state)")
    found = loop_state_violations(bad)
    assert len(found) == 1 and found[0].startswith("DSL-LOOP-STATE: line 4:") and "`state`" in found[0]


def test_assigned_to_another_name_is_flagged():
    assert loop_state_violations(ORDERED.replace("state = order.arrive", "other = order.arrive"))


def test_outside_a_loop_and_non_mutating_calls_are_clean():
    assert loop_state_violations("order.arrive(state)\n") == []
    assert loop_state_violations("for k in range(n):\n    pipe.consumer_release(state)\n    state.advance()\n") == []
    assert loop_state_violations("for k in range(n):\n    barrier.arrive()\n") == []     # NamedBarrier.arrive()


def test_for_loops_count_too():
    assert loop_state_violations("for t in range(n):\n    order.arrive(s)\n")


def test_render_refuses_a_template_that_drops_the_state(monkeypatch):
    from tests.test_dsl import BF16, full
    cfg = full(tile_shape=(128, 128, 64), mainloop_schedule="pingpong", epilogue_schedule="tma_warp_specialized")
    good = dsl.render_dsl(BF16, cfg)
    real = dsl._environment

    class Env:
        def __init__(self):
            self.env = real()

        def get_template(self, name):
            template = self.env.get_template(name)

            class T:
                def render(self, **ctx):
                    return template.render(**ctx).replace("order_state = wg_order.arrive(order_state)",
                                                          "wg_order.arrive(order_state)")
            return T()

    monkeypatch.setattr(dsl, "_environment", Env)
    with pytest.raises(CutegenError, match="DSL-LOOP-STATE"):
        dsl.render_dsl(BF16, cfg)
    assert "order_state = wg_order.arrive(order_state)" in good
