"""A TMA/mbarrier pipeline as data: its barriers, its shared-memory stages, and per role the
operations it performs, in program order, over a bounded number of tiles and k-blocks.

The term is what a kernel's producer/consumer protocol *is*, unrolled: a producer warp that waits for
a stage to be empty, arms the stage's full barrier with the bytes it expects and issues the TMA loads
that will complete those bytes; consumer warpgroups that wait for a stage to be full, read it with
WGMMA and release it; ping-pong's ordering barrier that lets one math warpgroup run its mainloop at a
time. ``legality.pipeline`` checks a term over every interleaving of its roles; renderers and
``cutegen.pipelines`` build terms from a kernel configuration.

Nothing here knows a backend: the same term describes CUTLASS's ``PipelineTmaAsync`` and the CuTe
DSL template's pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Union


@dataclass(frozen=True)
class Barrier:
    """One ``mbarrier`` object, initialized with an expected arrival count (``mbarrier.init``)."""
    name: str
    count: int
    cta: int = 0


# --- operations -----------------------------------------------------------------------------------
# Every operation carries where it sits in the kernel (tile, k-block, stage) so a violation can name it.

@dataclass(frozen=True)
class Init:
    """``mbarrier.init`` of these barriers (by one thread, before the cluster synchronizes)."""
    barriers: tuple[str, ...]


@dataclass(frozen=True)
class Sync:
    """``fence.mbarrier_init`` + cluster barrier: every role of the cluster reaches it before any passes."""
    id: int = 0


@dataclass(frozen=True)
class Wait:
    """``mbarrier.try_wait.parity`` in a loop: returns once the phase of this parity has completed.
    ``release_of``: on an empty barrier, the fill (n-th k-block loaded) whose release it waits for;
    None: the stage's previous fill, counted by the waits (the producer's own stage)."""
    barrier: str
    parity: int
    tile: int = -1
    kb: int = -1
    stage: int = -1
    release_of: int | None = None


@dataclass(frozen=True)
class Arrive:
    """``mbarrier.arrive`` with this many arrivals; ``expect_tx`` bytes are added to the transaction
    count first (``mbarrier.arrive.expect_tx``). ``release`` names the stage a consumer hands back."""
    barrier: str
    count: int = 1
    expect_tx: int = 0
    tile: int = -1
    kb: int = -1
    stage: int = -1
    release: bool = False


@dataclass(frozen=True)
class Load:
    """``cp.async.bulk.tensor`` into ``stage`` of each CTA in ``targets``, completing ``bytes_per_cta``
    on that CTA's ``barrier`` (``mbarrier::complete_tx::bytes``) when it lands. ``fill`` numbers the
    stage's contents (the n-th k-block the stage holds); ``readers`` are the roles (names without the
    ``@cta`` suffix) that must read it in each target CTA."""
    operand: str
    stage: int
    barrier: str                  # the barrier's name without the CTA suffix: each target's own
    bytes_per_cta: int
    fill: int
    targets: tuple[int, ...] = (0,)
    readers: tuple[str, ...] = ()
    tile: int = -1
    kb: int = -1


@dataclass(frozen=True)
class Read:
    """The WGMMAs of one k-block read ``stage``, expecting the contents numbered ``fill``."""
    stage: int
    fill: int
    tile: int = -1
    kb: int = -1


@dataclass(frozen=True)
class MathBegin:
    """A ping-pong math warpgroup enters its mainloop (the section its ordering barrier guards)."""
    tile: int = -1


@dataclass(frozen=True)
class MathEnd:
    tile: int = -1


@dataclass(frozen=True)
class MmaCommit:
    """``wgmma.commit_group``: the WGMMAs issued since the last commit form one batch. Their ``Read``s
    of shared memory are asynchronous: they go on until a ``MmaWait`` retires the batch."""
    tile: int = -1
    kb: int = -1


@dataclass(frozen=True)
class MmaWait:
    """``wgmma.wait_group N``: returns once at most ``pending`` committed batches are still in flight
    (the older ones have finished reading their stages)."""
    pending: int = 0
    tile: int = -1
    kb: int = -1


Op = Union[Init, Sync, Wait, Arrive, Load, Read, MathBegin, MathEnd, MmaCommit, MmaWait]

# Ops that touch nothing another role or a load can see (a role's own WGMMA batches): the explorer runs
# them together with the move before them (they commute with every other move and are always enabled).
LOCAL_OPS = (MmaCommit, MmaWait)


@dataclass(frozen=True)
class Role:
    name: str
    cta: int
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Pipeline:
    """Barriers (names are per CTA: ``full0@1`` is stage 0's full barrier of CTA 1), the stage count,
    the roles, and what the term stands for (``meta``: backend, configuration, bounds)."""
    barriers: tuple[Barrier, ...]
    stages: int
    roles: tuple[Role, ...]
    ctas: int = 1
    meta: dict = field(default_factory=dict, compare=False)

    def barrier(self, name: str) -> Barrier:
        for b in self.barriers:
            if b.name == name:
                return b
        raise KeyError(name)

    def role(self, name: str) -> Role:
        for r in self.roles:
            if r.name == name:
                return r
        raise KeyError(name)

    def with_role(self, role: Role) -> "Pipeline":
        return replace(self, roles=tuple(role if r.name == role.name else r for r in self.roles))

    def with_barrier(self, barrier: Barrier) -> "Pipeline":
        return replace(self, barriers=tuple(barrier if b.name == barrier.name else b for b in self.barriers))


def at(name: str, cta: int) -> str:
    """The name of a per-CTA barrier."""
    return f"{name}@{cta}"


def describe(op: Op) -> str:
    """One op as a person reads it."""
    where = []
    for attr in ("tile", "kb", "stage"):
        v = getattr(op, attr, -1)
        if v is not None and v >= 0:
            where.append(f"{'k-block' if attr == 'kb' else attr} {v}")
    loc = f" ({', '.join(where)})" if where else ""
    if isinstance(op, Init):
        return f"init {', '.join(op.barriers)}"
    if isinstance(op, Sync):
        return f"cluster sync {op.id}"
    if isinstance(op, Wait):
        return f"wait {op.barrier} parity {op.parity}{loc}"
    if isinstance(op, Arrive):
        tx = f" expect_tx {op.expect_tx} B" if op.expect_tx else ""
        return f"arrive {op.barrier} x{op.count}{tx}{loc}"
    if isinstance(op, Load):
        return (f"TMA load {op.operand} -> stage {op.stage} of CTA {','.join(map(str, op.targets))} "
                f"({op.bytes_per_cta} B each, fill {op.fill}, tile {op.tile}, k-block {op.kb})")
    if isinstance(op, Read):
        return f"WGMMA reads stage {op.stage} (fill {op.fill}){loc}"
    if isinstance(op, MathBegin):
        return f"mainloop begins{loc}"
    if isinstance(op, MathEnd):
        return f"mainloop ends{loc}"
    if isinstance(op, MmaCommit):
        return f"wgmma.commit_group{loc}"
    if isinstance(op, MmaWait):
        return f"wgmma.wait_group {op.pending}{loc}"
    return repr(op)
