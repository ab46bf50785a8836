"""Protocol mutations of a valid pipeline term, each paired with the rule that must reject it."""
from __future__ import annotations

from dataclasses import replace

from cutegen.legality.pipeline_term import Arrive, Load, Read, Role, Wait


def _edit_ops(term, role_name, fn):
    role = term.role(role_name)
    return term.with_role(Role(role.name, role.cta, tuple(fn(list(role.ops)))))


def _first(ops, pred, start=0):
    return next(i for i, op in enumerate(ops) if i >= start and pred(op))


def drop_expect_tx(term):
    def f(ops):
        i = _first(ops, lambda o: isinstance(o, Arrive) and o.expect_tx)
        ops[i] = replace(ops[i], expect_tx=0)
        return ops
    return _edit_ops(term, "producer@0", f)


def wrong_byte_count(term):
    def f(ops):
        i = _first(ops, lambda o: isinstance(o, Arrive) and o.expect_tx and o.kb == 1)
        ops[i] = replace(ops[i], expect_tx=ops[i].expect_tx - 16)
        return ops
    return _edit_ops(term, "producer@0", f)


def arrival_count_plus_one(term):
    b = term.barrier("empty0@0")
    return term.with_barrier(replace(b, count=b.count + 1))


def arrival_count_minus_one(term):
    b = term.barrier("empty0@0")
    return term.with_barrier(replace(b, count=b.count - 1))


def wrong_wait_parity(term):
    def f(ops):
        i = _first(ops, lambda o: isinstance(o, Wait) and o.barrier.startswith("full") and o.kb == 0 and o.tile == 0)
        ops[i] = replace(ops[i], parity=ops[i].parity ^ 1)
        return ops
    return _edit_ops(term, "mma0@0", f)


def release_before_last_read(term):
    def f(ops):
        r = _first(ops, lambda o: isinstance(o, Read) and o.kb == 1)
        rel = _first(ops, lambda o: isinstance(o, Arrive) and o.release and o.kb == 1)
        op = ops.pop(rel)
        ops.insert(r, op)
        return ops
    return _edit_ops(term, "mma0@0", f)


def load_before_empty_wait(term):
    def f(ops):
        w = _first(ops, lambda o: isinstance(o, Wait) and o.barrier.startswith("empty") and o.tile == 1 and o.kb == 0)
        ld = _first(ops, lambda o: isinstance(o, Load), start=w)
        op = ops.pop(ld)
        ops.insert(w, op)
        return ops
    return _edit_ops(term, "producer@0", f)


def swap_order_arrivals(term):
    """Each ping-pong warpgroup hands the turn to itself instead of the other."""
    def f_for(role_name):
        def f(ops):
            return [replace(o, barrier=o.barrier.replace("order1", "orderX").replace("order0", "order1")
                            .replace("orderX", "order0"))
                    if isinstance(o, Arrive) and o.barrier.startswith("order") else o for o in ops]
        return f
    term = _edit_ops(term, "mma0@0", f_for("mma0@0"))
    return _edit_ops(term, "mma1@0", f_for("mma1@0"))


def no_init_sync(term):
    def f(ops):
        return [o for o in ops if type(o).__name__ != "Sync"]
    return _edit_ops(term, "mma0@0", f)


def drop_order_wait(term):
    """The second ping-pong warpgroup no longer waits for its turn."""
    def f(ops):
        return [o for o in ops if not (isinstance(o, Wait) and o.barrier.startswith("order"))]
    return _edit_ops(term, "mma1@0", f)
