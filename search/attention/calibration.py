"""The figures the attention cost model is calibrated against: the issue's H100 figures (first), and every committed
H200 timing (``fit_h200``, ``heldout_h200``: search/attention/measured.py's records, shapes held out).

CUTLASS 88 example, forward, fp16, the best of its kernels (the example's instantiations for the head dim:
``cutegen.ops.attention.config.EXAMPLE_CONFIGS``), TFLOP/s on one H100 (2026-11-24; FLOPs 4 B H S^2 D,
halved for causal). The model prices each of the example's kernels for the shape and takes the best, as the
figure does. ``FIT`` (the non-causal head-dim-128 shapes) chose OVERLAP_LOSS by ``fit_overlap_loss``; the
rest are held out. The H200 cuDNN figures of the issue are a second held-out set for the same kernels' class
of performance (the issue says the example matches or beats cuDNN), used only as a sanity band.
"""
from __future__ import annotations

import math

# ((batch, heads, seqlen, head_dim), causal) -> TFLOP/s of the CUTLASS 88 example's best fp16 kernel, H100
EXAMPLE_88_H100 = {
    ((4, 32, 4096, 128), False): 662, ((4, 32, 4096, 128), True): 586,
    ((2, 16, 8192, 128), False): 673, ((2, 16, 8192, 128), True): 609,
    ((8, 16, 2048, 64), False): 456, ((8, 16, 2048, 64), True): 375,
    ((1, 32, 16384, 128), False): 638, ((1, 32, 16384, 128), True): 610,
}
FIT = (((4, 32, 4096, 128), False), ((2, 16, 8192, 128), False), ((1, 32, 16384, 128), False))
HELD_OUT = tuple(k for k in EXAMPLE_88_H100 if k not in FIT)


def predicted_best(key, overlap_loss: float | None = None) -> float:
    """The model's TFLOP/s of the example's best kernel for one shape of the table."""
    from cutegen.legality.attention import check_attention
    from cutegen.ops.attention.config import EXAMPLE_CONFIGS
    from cutegen.ops.attention.problem import AttentionProblem

    from . import cost

    (b, h, s, d), causal = key
    p = AttentionProblem(b, h, h, s, s, d, dtype="f16", causal=causal)
    saved = cost.OVERLAP_LOSS
    if overlap_loss is not None:
        cost.OVERLAP_LOSS = overlap_loss
    try:
        best = 0.0
        for c in EXAMPLE_CONFIGS[d]:
            us, _ = cost.config_cost(p, c, check_attention(p, c).smem_bytes)
            best = max(best, cost.tflops(p, us))
        return best
    finally:
        cost.OVERLAP_LOSS = saved


def errors(keys, overlap_loss: float | None = None) -> dict:
    """predicted / measured per shape."""
    return {k: predicted_best(k, overlap_loss) / EXAMPLE_88_H100[k] for k in keys}


def geomean_abs_log_error(ratios) -> float:
    ratios = list(ratios)
    return math.exp(sum(abs(math.log(r)) for r in ratios) / len(ratios)) - 1.0


def fit_overlap_loss(grid=tuple(i / 20 for i in range(0, 13))) -> float:
    """The OVERLAP_LOSS of ``grid`` with the smallest error on ``FIT`` (the value cost.py carries)."""
    return min(grid, key=lambda a: (geomean_abs_log_error(errors(FIT, a).values()), a))


# --- the H200 fit: every committed timing (search/attention/measured.py), shapes held out -------------------------
# The constants ``fit_h200`` chooses (cost.py carries the all-shapes values) and the grid each one is searched on.
H200_GRID = {
    "CTA_LAUNCH_CLK": tuple(float(x) for x in range(0, 9001, 1000)),
    "PERSISTENT_KV_SHARE": tuple(x / 100 for x in range(0, 25, 2)),
    "QSEP_KV_SHARE": tuple(x / 100 for x in range(0, 17, 2)),
    "Q_PREFETCH_KV_SHARE": tuple(x / 100 for x in range(0, 17, 2)),
    "TWO_BLOCK_LAUNCH_SHARE": tuple(x / 4 for x in range(0, 5)),
    "SPILL_HBM_SHARE": tuple(x / 10 for x in range(0, 11)),
    "L2_LATENCY_CLK": tuple(float(x) for x in range(600, 3601, 600)),
    "QUEUE_LOSS": tuple(x / 10 for x in range(0, 11)),
    "OVERLAP_LOSS": tuple(i / 20 for i in range(0, 13)),
}


def _with(params: dict):
    """A context that sets cost-module constants and restores them."""
    from contextlib import contextmanager

    from . import cost

    @contextmanager
    def ctx():
        saved = {k: getattr(cost, k) for k in params}
        for k, v in params.items():
            setattr(cost, k, v)
        try:
            yield
        finally:
            for k, v in saved.items():
                setattr(cost, k, v)
    return ctx()


def _predict_all(records, params: dict) -> list[float]:
    from cutegen.legality.attention import check_attention

    from .cost import config_cost
    with _with(params):
        return [config_cost(t.problem, t.config, _smem(t))[0] for t in records]


_SMEM: dict = {}


def _smem(t):
    key = (t.problem, t.config)
    if key not in _SMEM:
        from cutegen.legality.attention import check_attention
        _SMEM[key] = check_attention(t.problem, t.config).smem_bytes
    return _SMEM[key]


def h200_errors(records, predicted) -> dict:
    """Absolute (|log predicted / measured|, geomean - 1), relative (the same after removing each run-and-shape
    group's mean log ratio: what ranking depends on), and the regret of the model's pick per group."""
    logs = [math.log(p / t.us) for p, t in zip(predicted, records)]
    groups: dict = {}
    for i, t in enumerate(records):
        groups.setdefault((t.source, t.shape), []).append(i)
    rel, regrets = [], []
    for idx in groups.values():
        mean = sum(logs[i] for i in idx) / len(idx)
        rel += [abs(logs[i] - mean) for i in idx] if len(idx) > 1 else []
        distinct = {records[i].config: i for i in idx}
        if len(distinct) > 1:
            ids = sorted(distinct.values(), key=lambda i: (predicted[i], records[i].config.to_json()))
            regrets.append(records[ids[0]].us / min(records[i].us for i in ids))
    gm = lambda xs: math.exp(sum(xs) / len(xs)) - 1.0 if xs else 0.0  # noqa: E731
    return {"absolute": gm([abs(x) for x in logs]), "relative": gm(rel),
            "regret_geomean": math.exp(sum(math.log(r) for r in regrets) / len(regrets)) if regrets else 1.0,
            "regret_worst": max(regrets) if regrets else 1.0, "groups": len(regrets), "records": len(records)}


def _objective(records, params) -> float:
    e = h200_errors(records, _predict_all(records, params))
    return e["relative"] + 0.5 * e["absolute"] + 0.5 * (e["regret_geomean"] - 1.0)


# Coordinate descent has more than one local minimum here (a persistent kernel's extra cost can sit on persistence
# itself or on its Q options): it starts from each of these and keeps the best.
H200_STARTS = (
    {"CTA_LAUNCH_CLK": 4000.0, "PERSISTENT_KV_SHARE": 0.1, "QSEP_KV_SHARE": 0.0, "Q_PREFETCH_KV_SHARE": 0.0,
     "TWO_BLOCK_LAUNCH_SHARE": 1.0, "SPILL_HBM_SHARE": 1.0, "L2_LATENCY_CLK": 1800.0, "QUEUE_LOSS": 0.3,
     "OVERLAP_LOSS": 0.3},
    {"CTA_LAUNCH_CLK": 4000.0, "PERSISTENT_KV_SHARE": 0.0, "QSEP_KV_SHARE": 0.06, "Q_PREFETCH_KV_SHARE": 0.06,
     "TWO_BLOCK_LAUNCH_SHARE": 0.25, "SPILL_HBM_SHARE": 1.0, "L2_LATENCY_CLK": 1800.0, "QUEUE_LOSS": 0.3,
     "OVERLAP_LOSS": 0.3},
)


def fit_h200(records, grid: dict = H200_GRID, start: dict | None = None, passes: int = 2) -> dict:
    """Coordinate descent over ``grid`` (one constant at a time, every grid value, ``passes`` times) from ``start``,
    or from each of H200_STARTS, keeping the best."""
    if start is None:
        fits = [fit_h200(records, grid, s, passes) for s in H200_STARTS]
        return min(fits, key=lambda p: (_objective(records, p), sorted(p.items())))
    params = dict(start)
    best = _objective(records, params)
    for _ in range(passes):
        moved = False
        for name, values in grid.items():
            for v in values:
                trial = dict(params, **{name: v})
                j = _objective(records, trial)
                if j < best - 1e-9:
                    best, params, moved = j, trial, True
        if not moved:
            break
    return params


def heldout_h200(records, grid: dict = H200_GRID, passes: int = 2) -> dict:
    """Leave one shape out: fit on the other shapes' records, predict the held-out shape's; the errors over all
    held-out predictions, with the model as it stands (``before``: the constants cost.py carries) beside them."""
    shapes = sorted({t.shape for t in records})
    predicted = [0.0] * len(records)
    fitted = {}
    for shape in shapes:
        train = [t for t in records if t.shape != shape]
        params = fit_h200(train, grid, passes=passes)
        fitted[shape] = params
        idx = [i for i, t in enumerate(records) if t.shape == shape]
        for i, p in zip(idx, _predict_all([records[i] for i in idx], params)):
            predicted[i] = p
    return {"heldout": h200_errors(records, predicted), "fitted": fitted}
