"""Read the TMA/mbarrier pipeline back out of a rendered CuTe DSL kernel and compare it with the term the
pipeline checker proves (rule DSL-PIPELINE-MATCH).

``legality.pipeline`` proves a term built by ``cutegen.pipelines`` (``tma_warp_specialized``); the kernel
that runs is the Python module ``templates/cute_dsl_sm90_gemm.py.j2`` renders. Nothing but this check ties
the two: a template edit that drops a wait, releases a stage early or miscounts arrivals would leave the
proof intact and the kernel wrong (the DSL-LOOP-STATE hang: "the checker proved the term; the rendering
lost it").

``read_back(source, tiles=, k_blocks=)`` runs the rendered module's ``Sm90Gemm.kernel`` (and what its
arguments come from: ``__init__``, ``_smem_layouts``, ``__call__``) in a small abstract interpreter, once
per role of every CTA of the cluster (warp 0 of warpgroup 0: the producer; warpgroups 1.. : the
consumers), over ``tiles`` work tiles of ``k_blocks`` k-tiles each. Module constants are evaluated from
the source. The pipeline APIs are modelled as nvidia-cutlass-dsl 4.8 implements them
(``cutlass/pipeline/sm90.py``, ``helpers.py``):

* ``PipelineTmaAsync.create``: per stage a full barrier (count: the producer group's size) and an empty
  barrier (count: the consumer group's size, as the kernel computes it); ``producer_acquire(s)`` waits
  on empty[s.index] for parity s.phase and arrives on full[s.index] with ``tx_count`` bytes;
  ``consumer_wait(s)`` waits on full[s.index] for parity s.phase; ``consumer_release(s)``: every consumer
  warp arrives once on empty[s.index] of each CTA in its cluster row and column (the signalling lanes of
  ``init_empty_barrier_arrive_signal``); ``producer_tail(s)`` waits on ``num_stages`` empty barriers,
  advancing s; ``sync_object_empty.wait(i, p)``: a wait.
* ``PipelineState``: index, phase, count; ``advance(n)`` flips the phase on every wrap.
* ``PipelineOrder``: barrier ``index * length + group``; ``wait(s)`` waits for parity s.phase on its own
  group's barrier; ``arrive(s)``: every thread of the warpgroup arrives on the next group's, then
  s.advance().
* ``cute.copy(tma_atom, src, smem[(..., i)], tma_bar_ptr=pipe.producer_get_barrier(s), mcast_mask=m)``: a
  TMA load of the atom's box (its bytes split over ``num_multicast`` CTAs) into stage i of each CTA of the
  mask, completing on that barrier; ``cute.gemm`` over ``tCrA[(..., i)]``: WGMMAs reading stage i;
  ``warpgroup.commit_group`` / ``wait_group(n)``: ``MmaCommit`` / ``MmaWait``.
* ``pipeline_init_arrive`` / ``pipeline_init_wait``: the mbarrier inits (made by warp 0) and the cluster
  barrier (``Init``, ``Sync``).
* Dynamic loops (``while``, ``for ... in range``) carry only the names the DSL's region analysis
  carries (assigned in the body, or with a method of their own called); others are reset at the end of
  each iteration, as the DSL does (DSL-LOOP-STATE).

The result is a ``Pipeline`` term in the builder's vocabulary; ``first_difference`` compares it with the
builder's term op by op and names the first role and op that differ. ``check_rendered`` does both for a
(problem, config) and the rendered source; ``cutegen.dsl`` refuses a rendering that differs.

Anything the interpreter cannot follow (a branch on a value it does not model) is itself a failure of
DSL-PIPELINE-MATCH: a kernel whose protocol cannot be read back is not checked.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field

from .legality.pipeline_term import (Arrive, Barrier, Init, Load, MathBegin, MathEnd, MmaCommit, MmaWait, Pipeline,
                                     Read, Role, Sync, Wait, at, describe)

RULE = "DSL-PIPELINE-MATCH"
WARP = 32
THREADS_PER_WARPGROUP = 128


class ReadBackError(Exception):
    """The interpreter could not follow the rendered kernel."""


# --- values -----------------------------------------------------------------------------------------

class Opaque:
    """A value the pipeline does not depend on (tensors, layouts of global memory, ...)."""

    def __repr__(self):
        return "<opaque>"


OPAQUE = Opaque()


@dataclass
class DType:
    name: str
    bits: int


_DTYPE_BITS = {"BFloat16": 16, "Float16": 16, "Float32": 32, "Float8E4M3FN": 8, "Float8E5M2": 8, "Int8": 8,
               "Uint8": 8, "Int32": 32, "TFloat32": 32}


@dataclass
class SmemLayout:
    dtype: DType | None
    shape: tuple


@dataclass
class TmaAtom:
    operand: str
    box_bytes: int
    num_multicast: int


class StageIndex(int):
    """A stage index read off a pipeline state: remembers which fill it stands for."""
    fill: int = -1
    producer: bool = False

    def __new__(cls, value, fill, producer=False):
        obj = super().__new__(cls, value)
        obj.fill = fill
        obj.producer = producer
        return obj


@dataclass
class PState:
    stages: int
    count: int
    index: int
    phase: int
    absolute: int = 0          # advances since creation: the fill number a consumer state stands for
    producer: bool = False     # a producer's state (starts on phase 1: the stages start empty)

    def advance(self, n: int = 1):
        for _ in range(n):
            self.index += 1
            self.count += 1
            self.absolute += 1
            if self.index == self.stages:
                self.index = 0
                self.phase ^= 1


@dataclass
class Group:
    size: int


@dataclass
class Mainloop:
    stages: int
    producer_count: int
    consumer_count: int
    tx: int


@dataclass
class BarrierRef:
    kind: str
    index: int


@dataclass
class Order:
    depth: int
    length: int
    group: int
    count: int


@dataclass
class Scheduler:
    tiles: int
    pos: int = 0
    executed: int = 0


@dataclass
class Work:
    sched: Scheduler
    tile: int


@dataclass
class Mask:
    ctas: tuple


@dataclass
class ClusterLayout:
    shape: tuple

    def coord(self, rank: int) -> tuple:
        out = []
        for extent in self.shape:
            out.append(rank % extent)
            rank //= extent
        return tuple(out)


@dataclass
class Func:
    node: ast.FunctionDef


# --- the interpreter ----------------------------------------------------------------------------------

@dataclass
class _Role:
    name: str
    cta: int
    warp: int
    ops: list = field(default_factory=list)


class _Kernel:
    def __init__(self, source: str, tiles: int, k_blocks: int):
        self.tree = ast.parse(source)
        self.tiles, self.k_blocks = tiles, k_blocks
        self.consts: dict = {}
        self.classes: dict = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign):
                try:
                    value = self.eval(node.value, {})
                except ReadBackError:
                    value = OPAQUE
                self.bind(node.targets[0], value, self.consts)
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
            elif isinstance(node, ast.FunctionDef):
                self.consts[node.name] = Func(node)
        if "Sm90Gemm" not in self.classes:
            raise ReadBackError("no class Sm90Gemm in the rendered module")
        self.methods = self.classes["Sm90Gemm"]
        cm, cn = self.consts["CLUSTER_MN"]
        self.cluster = (cm, cn)
        self.barriers: dict = {}           # name -> count (per CTA, without the @cta suffix)
        self.barrier_order: list = []
        self.pending_init: list = []

    # -- expressions --
    def eval(self, node, env):
        ev = lambda n: self.eval(n, env)           # noqa: E731
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.consts:
                return self.consts[node.id]
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            if node.id in ("range", "min", "max", "len", "int", "tuple", "isinstance"):
                return node.id
            return OPAQUE
        if isinstance(node, ast.Tuple):
            out = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    v = ev(e.value)
                    if not isinstance(v, (tuple, list)):
                        return OPAQUE
                    out.extend(v)
                else:
                    out.append(ev(e))
            return tuple(out)
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(a, Opaque) or isinstance(b, Opaque):
                return OPAQUE
            ops = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
                   ast.FloorDiv: lambda x, y: x // y, ast.Mod: lambda x, y: x % y, ast.Div: lambda x, y: x / y}
            if isinstance(a, int) and isinstance(b, int):
                value = int(ops[type(node.op)](int(a), int(b)))
                tagged = a if isinstance(a, StageIndex) else b if isinstance(b, StageIndex) else None
                # an index computed from a state's still stands for that state's fill
                return StageIndex(value, tagged.fill, tagged.producer) if tagged is not None else value
            return ops[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            if isinstance(v, Opaque):
                return OPAQUE
            return {ast.Not: lambda x: not x, ast.USub: lambda x: -x, ast.UAdd: lambda x: x}[type(node.op)](v)
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            if any(isinstance(v, Opaque) for v in vals):
                return OPAQUE
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                if isinstance(left, Opaque) or isinstance(right, Opaque):
                    return OPAQUE
                fn = {ast.Eq: lambda x, y: x == y, ast.NotEq: lambda x, y: x != y, ast.Lt: lambda x, y: x < y,
                      ast.LtE: lambda x, y: x <= y, ast.Gt: lambda x, y: x > y, ast.GtE: lambda x, y: x >= y}
                if not fn[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            cond = ev(node.test)
            if isinstance(cond, Opaque):
                return OPAQUE
            return ev(node.body) if cond else ev(node.orelse)
        if isinstance(node, ast.Subscript):
            base, idx = ev(node.value), ev(node.slice)
            if isinstance(base, (tuple, list)) and isinstance(idx, int):
                return base[idx]
            if isinstance(base, (tuple, list)) and isinstance(node.slice, ast.Slice):
                lo = ev(node.slice.lower) if node.slice.lower else None
                hi = ev(node.slice.upper) if node.slice.upper else None
                return tuple(base[lo:hi])
            return ("subscript", base, idx)
        if isinstance(node, ast.Slice):
            return OPAQUE
        if isinstance(node, ast.Attribute):
            return self.attribute(ev(node.value), node.attr, node, env)
        if isinstance(node, ast.Call):
            return self.call(node, env)
        if isinstance(node, ast.JoinedStr):
            return OPAQUE
        return OPAQUE

    def attribute(self, base, attr, node, env):
        dotted = _dotted(node)
        if dotted.startswith("cutlass.") and attr in _DTYPE_BITS and dotted.count(".") == 1:
            return DType(attr, _DTYPE_BITS[attr])
        if isinstance(base, PState):
            if attr == "index":
                return StageIndex(base.index, base.absolute, base.producer)
            if attr in ("phase", "count", "stages"):
                return getattr(base, attr)
            return ("method", base, attr)
        if isinstance(base, Work):
            if attr == "is_valid_tile":
                return base.tile < base.sched.tiles
            return OPAQUE
        if isinstance(base, Scheduler):
            if attr == "num_tiles_executed":
                return base.executed
            return ("method", base, attr)
        if isinstance(base, (Mainloop, Order, ClusterLayout)):
            if attr == "sync_object_empty" and isinstance(base, Mainloop):
                return ("empty_sync", base)
            if attr == "sync_object_full" and isinstance(base, Order):
                return ("order_sync", base)
            if attr == "shape" and isinstance(base, ClusterLayout):
                return base.shape
            return ("method", base, attr)
        if isinstance(base, tuple) and base and base[0] in ("empty_sync",):
            return ("method", base, attr)
        if isinstance(base, dict) and base.get("__self__"):
            return base.get(attr, OPAQUE)
        return OPAQUE

    def call(self, node, env):
        fn = node.func
        name = _dotted(fn)
        short = name.rsplit(".", 1)[-1]
        args = [self.eval(a, env) for a in node.args]
        kw = {k.arg: self.eval(k.value, env) for k in node.keywords if k.arg}
        role = env.get("__role__")

        # methods of modelled objects
        if isinstance(fn, ast.Attribute):
            target = self.eval(fn.value, env)
            if isinstance(target, dict) and target.get("__self__"):
                if fn.attr in self.methods:
                    return self.invoke(self.methods[fn.attr], target, args, kw, role)
                return OPAQUE
            if isinstance(target, PState):
                if fn.attr == "advance":
                    target.advance(int(args[0]) if args else 1)
                elif fn.attr == "reset_count":
                    target.count = 0
                elif fn.attr == "clone":
                    return copy.copy(target)
                return None
            if isinstance(target, Scheduler):
                if fn.attr == "initial_work_tile_info" or fn.attr == "get_current_work":
                    return Work(target, target.pos)
                if fn.attr == "advance_to_next_work":
                    step = kw.get("advance_count", args[0] if args else 1)
                    target.pos += int(step)
                    target.executed += 1
                    return None
                return OPAQUE
            if isinstance(target, Mainloop):
                return self.mainloop_call(target, fn.attr, args, kw, role)
            if isinstance(target, Order):
                return self.order_call(target, fn.attr, args, kw, role)
            if isinstance(target, tuple) and target and target[0] == "empty_sync":
                if fn.attr == "wait":
                    self.emit(role, Wait(self.bar("empty", args[0], role), int(args[1]), *self.current_where(role),
                                         stage=int(args[0]),
                                         release_of=None if getattr(args[0], "producer", True) else args[0].fill))
                    return None
                raise ReadBackError(f"line {node.lineno}: sync_object_empty.{fn.attr} is not modelled")
            if isinstance(target, ClusterLayout) and fn.attr == "get_flat_coord":
                return target.coord(int(args[0]))

        if name in self.consts and isinstance(self.consts[name], Func):
            return OPAQUE         # module helpers (_major, _make_r2s, ...) do not touch the pipeline
        if short == "make_warp_uniform":
            return args[0]
        if name == "cute.arch.thread_idx":
            return (role.warp * WARP, 0, 0)
        if name == "cute.arch.warp_idx":
            return role.warp
        if name == "cute.arch.block_idx_in_cluster":
            return role.cta
        if name == "cute.make_layout" and args and isinstance(args[0], tuple) and all(isinstance(a, int) for a in args[0]):
            return ClusterLayout(args[0])
        if short == "make_layout_image_mask":
            layout, coord, mode = args[0], args[1], kw.get("mode")
            ctas = tuple(sorted(r for r in range(_prod(layout.shape))
                                if all(layout.coord(r)[d] == coord[d] for d in range(len(coord)) if d != mode)))
            return Mask(ctas)
        if short == "make_smem_layout_atom":
            return SmemLayout(args[1] if isinstance(args[1], DType) else None, ())
        if short == "tile_to_shape":
            return SmemLayout(args[0].dtype if isinstance(args[0], SmemLayout) else None, tuple(args[1]))
        if short == "slice_" and isinstance(args[0], SmemLayout):
            keep = tuple(e for e, c in zip(args[0].shape, args[1]) if c is None)
            return SmemLayout(args[0].dtype, keep)
        if short == "size_in_bytes" and isinstance(args[1], SmemLayout):
            return _prod(args[1].shape) * args[0].bits // 8
        if short == "make_tiled_tma_atom":
            op, tensor, layout, tiler = args[:4]
            operand = _dotted(node.args[1]).removeprefix("m")[:1].upper()
            bits = layout.dtype.bits if isinstance(layout, SmemLayout) and layout.dtype else None
            box = _prod(tiler) * bits // 8 if bits and all(isinstance(t, int) for t in tiler) else None
            return (TmaAtom(operand, box, int(kw.get("num_multicast", 1))), OPAQUE)
        if short == "CooperativeGroup":
            return Group(int(args[1]) if len(args) > 1 else int(kw.get("size", 1)))
        if name.endswith("PipelineTmaAsync.create"):
            m = Mainloop(int(kw["num_stages"]), kw["producer_group"].size, kw["consumer_group"].size, kw["tx_count"])
            for s in range(m.stages):
                self.declare(f"full{s}", m.producer_count)
            for s in range(m.stages):
                self.declare(f"empty{s}", m.consumer_count)
            if role.warp == 0:
                self.pending_init += [f"full{s}" for s in range(m.stages)] + [f"empty{s}" for s in range(m.stages)]
            return m
        if name.endswith("PipelineOrder.create"):
            o = Order(int(kw["depth"]), int(kw["length"]), int(kw["group_id"]), kw["producer_group"].size)
            for i in range(o.depth * o.length):
                self.declare(f"order{i}", o.count)
            if role.warp == 0:
                self.pending_init += [f"order{i}" for i in range(o.depth * o.length)]
            return o
        if name.endswith("pipeline.PipelineOrder"):
            sync, depth, length, group = args[:4]
            base = sync[1] if isinstance(sync, tuple) else None
            return Order(int(depth), int(length), int(group), base.count if base else 0)
        if name.endswith("pipeline.PipelineState"):
            return PState(int(args[0]), int(args[1]), int(args[2]), int(args[3]))
        if short == "make_pipeline_state":
            producer = _dotted(node.args[0]).endswith("Producer")
            return PState(int(args[1]), 0, 0, 1 if producer else 0, producer=producer)
        if short in ("Int32", "Int64") and args and isinstance(args[0], int):
            return int(args[0])
        if name.endswith("StaticPersistentTileScheduler.create"):
            return Scheduler(self.tiles)
        if short == "pipeline_init_arrive":
            if self.pending_init:
                self.emit(role, Init(tuple(at(b, role.cta) for b in self.pending_init)))
                self.pending_init = []
            return None
        if short == "pipeline_init_wait":
            self.emit(role, Sync(0))
            return None
        if short == "size" and node.args and _dotted(node.args[0]) == "gA":
            return self.k_blocks         # k_tiles: the k-tiles of a work tile
        if short == "size" and node.args and _dotted(node.args[0]) == "tCrA":
            return int(self.consts["TILE_MNK"][2]) // int(self.consts["MMA_INST_MNK"][2])   # WGMMAs per k-tile
        if short == "copy" and args and isinstance(args[0], TmaAtom) and "tma_bar_ptr" in kw:
            return self.load(node, args, kw, role)
        if name == "cute.gemm":
            for a in args:
                for idx in _stage_indices(a):
                    op = Read(int(idx), idx.fill, *self.fill_where(idx.fill))
                    if not role.ops or role.ops[-1] != op:
                        self.emit(role, op)
            return None
        if name.endswith("warpgroup.commit_group"):
            self.emit(role, MmaCommit(*self.current_where(role)))
            return None
        if name.endswith("warpgroup.wait_group"):
            self.emit(role, MmaWait(int(args[0]), *self.current_where(role)))
            return None
        if short in ("range", "range_constexpr") or name == "range":
            return ("range", args)
        return OPAQUE

    # -- pipeline calls --
    def declare(self, name, count):
        if name not in self.barriers:
            self.barrier_order.append(name)
        self.barriers[name] = count

    def bar(self, kind, index, role, cta=None):
        return at(f"{kind}{int(index)}", role.cta if cta is None else cta)

    def fill_where(self, fill):
        k = self.k_blocks
        return (fill // k, fill % k)

    def where(self, idx):
        fill = getattr(idx, "fill", -1)
        return self.fill_where(fill) if fill >= 0 else (-1, -1)

    def current_where(self, role):
        return (getattr(role, "tile", -1), getattr(role, "kb", -1))

    def emit(self, role, op):
        if op is not None:
            role.ops.append(op)

    def peers(self, cta):
        cm, cn = self.cluster
        layout = ClusterLayout((cm, cn))
        me = layout.coord(cta)
        return tuple(sorted((r for r in range(cm * cn)
                             if layout.coord(r)[0] == me[0] or layout.coord(r)[1] == me[1]), key=lambda r: r != cta))

    def mainloop_call(self, m: Mainloop, method, args, kw, role):
        if method == "producer_acquire":
            s = args[0]
            t, kb = self.fill_where(s.absolute)
            self.emit(role, Wait(self.bar("empty", s.index, role), s.phase, t, kb, s.index))
            # one elected thread arrives, with the stage's transaction bytes (arrive_and_expect_tx)
            self.emit(role, Arrive(self.bar("full", s.index, role), 1, m.tx, t, kb, s.index))
            return None
        if method == "producer_commit":
            return None
        if method == "producer_get_barrier":
            return BarrierRef("full", StageIndex(args[0].index, args[0].absolute))
        if method == "consumer_wait":
            s = args[0]
            t, kb = self.fill_where(s.absolute)
            self.emit(role, self.math_begin(role, t))
            self.emit(role, Wait(self.bar("full", s.index, role), s.phase, t, kb, s.index))
            return None
        if method == "consumer_release":
            s = args[0]
            t, kb = self.fill_where(s.absolute)
            for d in self.peers(role.cta):
                self.emit(role, Arrive(self.bar("empty", s.index, role, d), THREADS_PER_WARPGROUP // WARP, 0, t, kb,
                                       s.index, release=True))
            return None
        if method == "producer_tail":
            s = args[0]
            for _ in range(m.stages):
                self.emit(role, Wait(self.bar("empty", s.index, role), s.phase, -1, -1, s.index))
                s.advance()
            return None
        raise ReadBackError(f"mainloop.{method} is not modelled")

    def math_begin(self, role, tile):
        """A ping-pong warpgroup enters its mainloop at its tile's first full-barrier wait."""
        if self.has_order and not getattr(role, "in_math", False):
            role.in_math = True
            return MathBegin(tile)
        return None

    def order_call(self, o: Order, method, args, kw, role):
        s = args[0]
        if method == "wait":
            self.emit(role, Wait(self.bar("order", s.index * o.length + o.group, role), s.phase, role.tile))
            return None
        if method == "arrive":
            if getattr(role, "in_math", False):
                self.emit(role, MathEnd(role.tile))
                role.in_math = False
            nxt = (o.group + 1) % o.length
            self.emit(role, Arrive(self.bar("order", s.index * o.length + nxt, role), THREADS_PER_WARPGROUP, 0,
                                   role.tile))
            s.advance()
            return s
        raise ReadBackError(f"PipelineOrder.{method} is not modelled")

    def load(self, node, args, kw, role):
        atom = args[0]
        bar = kw["tma_bar_ptr"]
        mask = kw.get("mcast_mask", 0)
        targets = mask.ctas if isinstance(mask, Mask) else (role.cta,)
        idx = [i for a in args[1:3] for i in _stage_indices(a)]
        if len(idx) != 1 or not isinstance(bar, BarrierRef):
            raise ReadBackError(f"line {node.lineno}: a TMA load whose stage or barrier is not a pipeline state's")
        stage = idx[0]
        if atom.box_bytes is None:
            raise ReadBackError(f"line {node.lineno}: the TMA atom's box size is not known")
        t, kb = self.fill_where(stage.fill)
        self.emit(role, Load(atom.operand, int(stage), f"full{int(bar.index)}", atom.box_bytes // atom.num_multicast,
                             stage.fill, targets, (), t, kb))
        return None

    # -- statements --
    def invoke(self, fdef: ast.FunctionDef, self_obj, args, kw, role):
        env = {"__role__": role, "self": self_obj}
        params = [a.arg for a in fdef.args.args][1:]
        for p, v in zip(params, args):
            env[p] = v
        env.update(kw)
        try:
            self.run(fdef.body, env)
        except _Return as r:
            return r.value
        return None

    def bind(self, target, value, env):
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            vals = value if isinstance(value, (tuple, list)) else [OPAQUE] * len(target.elts)
            for t, v in zip(target.elts, vals):
                self.bind(t, v, env)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            owner = env.get(target.value.id)
            if isinstance(owner, dict):
                owner[target.attr] = value

    def run(self, body, env):
        for stmt in body:
            self.stmt(stmt, env)

    def stmt(self, s, env):
        role = env["__role__"]
        if isinstance(s, ast.Assign):
            v = self.eval(s.value, env)
            for t in s.targets:
                self.bind(t, v, env)
        elif isinstance(s, ast.AugAssign):
            cur = self.eval(s.target, env)
            inc = self.eval(s.value, env)
            if isinstance(cur, int) and isinstance(inc, int):
                op = {ast.Add: cur + inc, ast.Sub: cur - inc}.get(type(s.op), OPAQUE)
                self.bind(s.target, op, env)
            else:
                self.bind(s.target, OPAQUE, env)
        elif isinstance(s, ast.Expr):
            self.eval(s.value, env)
        elif isinstance(s, ast.If):
            cond = self.eval(s.test, env)
            if isinstance(cond, Opaque) or isinstance(cond, tuple):
                if _touches_pipeline(s):
                    raise ReadBackError(f"line {s.lineno}: the branch `if {ast.unparse(s.test)}` decides pipeline "
                                        f"operations on a value the read-back does not model")
                return
            self.run(s.body if cond else s.orelse, env)
        elif isinstance(s, ast.While):
            carried = _carried(s)
            guard = 0
            while True:
                cond = self.eval(s.test, env)
                if isinstance(cond, Opaque):
                    raise ReadBackError(f"line {s.lineno}: the loop condition `{ast.unparse(s.test)}` is not modelled")
                if not cond:
                    break
                self.dynamic_iteration(s.body, env, carried, role)
                guard += 1
                if guard > 10_000:
                    raise ReadBackError(f"line {s.lineno}: the loop does not end")
        elif isinstance(s, ast.For):
            it = self.eval(s.iter, env)
            if isinstance(it, tuple) and it and it[0] == "range" and not all(isinstance(a, int) for a in it[1]) \
                    and not _touches_pipeline(s):
                return                   # an epilogue loop over register fragments
            if not (isinstance(it, tuple) and it and it[0] == "range" and all(isinstance(a, int) for a in it[1])):
                raise ReadBackError(f"line {s.lineno}: `for` over `{ast.unparse(s.iter)}` is not modelled")
            bounds = [int(a) for a in it[1]]
            dynamic = _dotted(s.iter.func) == "range"
            carried = _carried(s) if dynamic else None
            for i in range(*bounds):
                self.bind(s.target, i, env)
                if isinstance(s.target, ast.Name) and s.target.id == "k_tile":
                    role.kb = i
                if dynamic:
                    self.dynamic_iteration(s.body, env, carried, role)
                else:
                    self.run(s.body, env)
            if isinstance(s.target, ast.Name) and s.target.id == "k_tile":
                role.kb = -1
        elif isinstance(s, ast.Return):
            raise _Return(self.eval(s.value, env) if s.value else None)
        elif isinstance(s, (ast.Pass, ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            pass
        else:
            raise ReadBackError(f"line {s.lineno}: statement {type(s).__name__} is not modelled")

    def dynamic_iteration(self, body, env, carried, role):
        """One iteration of a loop the DSL turns into an scf loop: names it does not carry come back to
        their value at the start of the iteration (their mutations are lost)."""
        kept = {k: copy.deepcopy(v) for k, v in env.items()
                if isinstance(v, PState) and k not in carried}
        tile_before = getattr(role, "tile", -1)
        if "work" in env and isinstance(env["work"], Work):
            role.tile = env["work"].tile
        self.run(body, env)
        for k, v in kept.items():
            cur = env.get(k)
            if isinstance(cur, PState):
                cur.index, cur.phase, cur.count, cur.absolute = v.index, v.phase, v.count, v.absolute
        del tile_before

    # -- the whole kernel --
    def roles(self) -> list[_Role]:
        cm, cn = self.cluster
        consumers = int(self.consts["NUM_MMA_WG"])
        self.has_order = "PipelineOrder.create" in ast.unparse(self.methods["kernel"])
        out = []
        for cta in range(cm * cn):
            out.append(_Role(at("producer", cta), cta, 0))
            for w in range(consumers):
                out.append(_Role(at(f"mma{w}", cta), cta, (w + 1) * THREADS_PER_WARPGROUP // WARP))
        for role in out:
            self.run_role(role)
        return out

    def run_role(self, role):
        self_obj = {"__self__": True}
        init_role = _Role("init", role.cta, role.warp)
        self.invoke(self.methods["__init__"], self_obj, [], {}, init_role)
        self.pending_init = []
        call = self.methods["__call__"]
        env = {"__role__": init_role, "self": self_obj}
        params = [a.arg for a in call.args.args][1:]
        for p in params:
            env[p] = OPAQUE
        kernel_args = None
        for stmt in call.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                inner = _kernel_call(stmt.value)
                if inner is not None:
                    kernel_args = [self.eval(a, env) for a in inner.args]
                    continue
            try:
                self.stmt(stmt, env)
            except ReadBackError:
                raise
            except Exception:         # host-side set-up the pipeline does not read
                for t in getattr(stmt, "targets", []):
                    self.bind(t, OPAQUE, env)
        if kernel_args is None:
            raise ReadBackError("__call__ does not launch self.kernel(...)")
        self.invoke(self.methods["kernel"], self_obj, kernel_args, {}, role)


class _Return(Exception):
    def __init__(self, value):
        self.value = value


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _stage_indices(value):
    if isinstance(value, StageIndex):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _stage_indices(v)


def _kernel_call(call: ast.Call):
    """``self.kernel(...)`` or ``self.kernel(...).launch(...)``."""
    node = call
    while isinstance(node, ast.Call):
        if _dotted(node.func) == "self.kernel":
            return node
        node = node.func.value if isinstance(node.func, ast.Attribute) else None
    return None


_PIPELINE_CALLS = ("producer_acquire", "consumer_wait", "consumer_release", "producer_tail", "wait", "arrive",
                   "wait_group", "commit_group", "gemm", "copy", "advance", "PipelineTmaAsync", "PipelineOrder")


def _touches_pipeline(node) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and _dotted(n.func).rsplit(".", 1)[-1] in _PIPELINE_CALLS:
            return True
    return False


def _carried(loop) -> set:
    """The names the CuTe DSL carries across a dynamic loop (cutegen/dsl_lint.py)."""
    names = set()
    for n in ast.walk(loop):
        if isinstance(n, (ast.Assign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                for x in ast.walk(t):
                    if isinstance(x, ast.Name):
                        names.add(x.id)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name):
            names.add(n.func.value.id)
    return names


# --- the term ---------------------------------------------------------------------------------------

def read_back(source: str, *, tiles: int, k_blocks: int) -> Pipeline:
    """The pipeline term of a rendered DSL kernel over ``tiles`` work tiles of ``k_blocks`` k-tiles."""
    k = _Kernel(source, tiles, k_blocks)
    roles = k.roles()
    stages = int(k.consts["AB_STAGES"])
    cm, cn = k.cluster
    # Which consumers read each fill: the producer's loads name them (the builder's ``readers``).
    readers: dict = {}
    for r in roles:
        for op in r.ops:
            if isinstance(op, Read):
                readers.setdefault((r.cta, op.fill), set()).add(r.name.split("@")[0])
    out_roles = []
    for r in roles:
        ops = []
        for op in r.ops:
            if op is None:
                continue
            if isinstance(op, Load):
                op = Load(op.operand, op.stage, op.barrier, op.bytes_per_cta, op.fill, op.targets,
                          tuple(sorted(readers.get((r.cta, op.fill), ()))), op.tile, op.kb)
            ops.append(op)
        out_roles.append(Role(r.name, r.cta, tuple(ops)))
    barriers = tuple(Barrier(at(name, c), k.barriers[name], c) for c in range(cm * cn) for name in k.barrier_order)
    return Pipeline(barriers, stages, tuple(out_roles), cm * cn,
                    {"backend": "dsl", "source": "read back", "tiles": tiles, "k_blocks": k_blocks})


def _canon(op, readers=True):
    if isinstance(op, Init):
        return Init(tuple(sorted(op.barriers)))
    if isinstance(op, Load) and not readers:
        return Load(op.operand, op.stage, op.barrier, op.bytes_per_cta, op.fill, op.targets, (), op.tile, op.kb)
    return op


def first_difference(expected: Pipeline, found: Pipeline) -> str | None:
    """The first place the rendered kernel's term differs from the verified one, as a sentence."""
    if expected.stages != found.stages:
        return f"the verified term has {expected.stages} stages, the rendered kernel {found.stages}"
    want = {b.name: b.count for b in expected.barriers}
    have = {b.name: b.count for b in found.barriers}
    for name in sorted(set(want) | set(have)):
        if want.get(name) != have.get(name):
            w = "no such barrier" if name not in want else f"mbarrier.init count {want[name]}"
            h = "no such barrier" if name not in have else f"mbarrier.init count {have[name]}"
            return f"barrier {name}: the verified term has {w}, the rendered kernel {h}"
    names_e = [r.name for r in expected.roles]
    names_f = [r.name for r in found.roles]
    if sorted(names_e) != sorted(names_f):
        return f"roles differ: the verified term has {', '.join(names_e)}; the rendered kernel {', '.join(names_f)}"
    # The loads' readers are derived from the consumers' reads: a consumer's difference is named first.
    for role, readers in [(r, False) for r in expected.roles] + [(r, True) for r in expected.roles]:
        ops_e = [_canon(o, readers) for o in role.ops]
        ops_f = [_canon(o, readers) for o in found.role(role.name).ops]
        for i in range(max(len(ops_e), len(ops_f))):
            a = ops_e[i] if i < len(ops_e) else None
            b = ops_f[i] if i < len(ops_f) else None
            if a != b:
                da = "nothing (its end)" if a is None else _show(a, b)
                db = "nothing (its end)" if b is None else _show(b, a)
                return f"{role.name}, op {i}: the verified term has `{da}`, the rendered kernel `{db}`"
    return None


def _show(op, other) -> str:
    text = describe(op)
    if other is not None and describe(other) == text:
        return repr(op)
    return text


def check_rendered(source: str, problem, config) -> list[str]:
    """DSL-PIPELINE-MATCH: the rendered kernel's pipeline, read back over each bound the checker explores and
    the full term's, equals the term ``cutegen.pipelines`` builds for (problem, config). One line per
    difference found (the first of each bound), empty when the kernel is the term."""
    from .pipelines import pipeline_of
    term, rebuild = pipeline_of(problem, config, "dsl", explore_cluster=True)
    stages = term.stages
    tiles = term.meta["tiles"]
    out = []
    for k_blocks in sorted({1, max(1, stages - 1), stages, stages + 1}):
        expected = rebuild(stages=stages, k_blocks=k_blocks)
        try:
            found = read_back(source, tiles=tiles, k_blocks=k_blocks)
        except ReadBackError as e:
            return [f"{RULE}: the rendered kernel's pipeline cannot be read back: {e}"]
        diff = first_difference(expected, found)
        if diff:
            out.append(f"{RULE}: {tiles} tile(s) of {k_blocks} k-tile(s): {diff}")
            break
    return out
