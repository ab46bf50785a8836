"""How good is the learned model on shapes it has not seen? Cross-validation by whole shape families.

Each grouping puts every sample of one family in the same fold: the correction is fitted on the other
families only (all harnesses) and scored on the held-out family's bench-harness samples. Figures:

  log_error   mean |ln(predicted / measured)| over held-out samples
  spearman    rank correlation between predicted and measured times over the configurations of each held-out
              problem (configurations measured several times: their median), mean over problems with >= 3
  regret      per held-out problem with >= 2 measured configurations: measured time of the model's pick over
              the measured best; geometric mean, and the worst
  within_sigma  share of held-out samples whose measured time lies within the model's own exp(+-sigma): about
              0.68 if its uncertainty is honest, lower if it is overconfident

The same figures for the prior alone (search/cost.py) on the same held-out samples are the baseline.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

import numpy as np

from .model import Correction


def _suite_of(problem, suites: dict) -> str:
    return suites.get(problem, "other")


GROUPINGS = {
    "m": lambda s, ctx: f"m={s.stated_problem.m}",
    "shape": lambda s, ctx: f"{s.stated_problem.m}x{s.stated_problem.n}x{s.stated_problem.k}x{s.stated_problem.batch}",
    "dtype": lambda s, ctx: s.stated_problem.dtype_a,
    "suite": lambda s, ctx: _suite_of(s.stated_problem, ctx.get("suites", {})),
    # one model's layers (ctx["models"]: (n, k) -> model, e.g. bench/llm.toml's name prefixes); the rest is "other"
    "model": lambda s, ctx: ctx.get("models", {}).get((s.stated_problem.n, s.stated_problem.k), "other"),
}


def spearman(a, b) -> float:
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def score(samples, predicted) -> dict:
    """Figures for predictions of bench-harness samples (parallel lists)."""
    meas = np.array([s.measured_us for s in samples])
    pred = np.asarray(predicted, dtype=np.float64)
    out = {"samples": len(samples), "log_error": float(np.mean(np.abs(np.log(pred / meas)))) if len(samples) else None}
    by_problem: dict = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for s, p, m in zip(samples, pred, meas):
        # one alternative: a configuration in one orientation under one launch plan
        plan = getattr(s, "plan", None)
        cell = by_problem[s.stated_problem][(s.problem != s.stated_problem, s.config.to_json(), plan.label() if plan else "")]
        cell[0].append(p)
        cell[1].append(m)
    rhos, regrets = [], []
    for configs in by_problem.values():
        p = np.array([np.median(v[0]) for v in configs.values()])
        m = np.array([np.median(v[1]) for v in configs.values()])
        if len(m) >= 3:
            r = spearman(p, m)
            if not math.isnan(r):
                rhos.append(r)
        if len(m) >= 2:
            regrets.append(m[int(np.argmin(p))] / m.min())
    out["problems"] = len(by_problem)
    out["spearman"] = float(np.mean(rhos)) if rhos else None
    out["spearman_problems"] = len(rhos)
    out["regret_geomean"] = float(np.exp(np.mean(np.log(regrets)))) if regrets else None
    out["regret_worst"] = float(max(regrets)) if regrets else None
    out["regret_problems"] = len(regrets)
    return out


def folds(samples, grouping: str, ctx: dict | None = None, min_train: int = 20, others=(), scored=None):
    """(family, training split, held-out samples) for each family of ``grouping``: the one place the split is
    made. The training split holds no sample of the family, of this kind or of ``others`` (so no shape is ever
    seen on any device); the held-out samples are the family's bench-harness ones (``scored`` chooses among
    them). A family whose training split would be under ``min_train`` samples is yielded with ``train=None``."""
    ctx = ctx or {}
    key = GROUPINGS[grouping]
    for g in sorted({key(s, ctx) for s in samples}):
        test = [s for s in samples if key(s, ctx) == g and s.harness == "bench" and (scored is None or scored(s))]
        train = [s for s in samples if key(s, ctx) != g]
        if len(train) < min_train:
            yield g, None, test
            continue
        train += [s for s in others if key(s, ctx) != g]
        if any(key(s, ctx) == g for s in train):                     # the split's own invariant, checked
            raise AssertionError(f"held-out family {g!r} leaked into its training split")
        yield g, tuple(train), test


def unlabelled(samples) -> list:
    """The held-out samples as a model may see them: without their measured times."""
    return [replace(s, measured_us=float("nan")) for s in samples]


def fit_correction(train, **model_args):
    """The learned correction fitted on ``train`` alone: a function of unlabelled samples -> (log correction,
    log sigma). What ``held_out`` calls per fold; it never receives a held-out sample."""
    model = Correction(**model_args).fit(list(train))

    def predict(samples):
        corr, sigma, _ = model.predict(samples)
        return corr, sigma
    return predict


def held_out(samples, grouping: str, ctx: dict | None = None, min_train: int = 20, others=(), scored=None,
             fit=fit_correction, only=None) -> dict:
    """{family: (held-out samples, predicted times, log sigmas)}: each family predicted by a model that ``fit``
    made from the training split alone, from the held-out samples without their times (``unlabelled``).
    ``only``: that family alone. Families without enough training data are left out (``skipped``)."""
    out: dict = {}
    for g, train, test in folds(samples, grouping, ctx, min_train, others, scored):
        if only is not None and g != only:
            continue
        if train is None:
            out.setdefault("skipped", []).append(g)
            continue
        if not test:
            continue
        corr, sigma = fit(train)(unlabelled(test))
        out[g] = (test, [s.prior_us * math.exp(c) for s, c in zip(test, corr)], list(sigma))
    return out


def leaks(samples, grouping: str, evaluate=None, ctx: dict | None = None, factor: float = 3.0) -> list:
    """Families whose held-out predictions change when that family's measured times are poisoned (times
    ``factor``): a held-out evaluation that never sees the fold leaves every prediction of it as it was.
    ``evaluate(samples, only) -> held_out(...)``-style dict (``only``: the one family needed, or None for
    all); default the held-out evaluation itself."""
    evaluate = evaluate or (lambda ss, only: held_out(ss, grouping, ctx, only=only))
    clean = evaluate(samples, None)
    key = GROUPINGS[grouping]
    changed = []
    for g in clean:
        if g == "skipped":
            continue
        poisoned = [replace(s, measured_us=s.measured_us * factor) if key(s, ctx or {}) == g else s for s in samples]
        again = evaluate(poisoned, g)
        if g not in again or not np.allclose(again[g][1], clean[g][1], rtol=1e-12, atol=0.0):
            changed.append(g)
    return changed


def cross_validate(samples, grouping: str, ctx: dict | None = None, min_train: int = 20, others=(),
                   scored=None, **model_args) -> dict:
    """Hold out each family of ``grouping`` in turn; score learned and prior on every held-out family.

    ``others``: samples of other device kinds the correction may also learn from (as the Predictor does);
    the held-out family is held out of them too, so no shape is ever seen on any device. ``scored``: a
    predicate choosing which held-out samples are scored (e.g. the stream-K ones); training is unchanged."""
    per_family = held_out(samples, grouping, ctx, min_train, others, scored,
                          fit=lambda train: fit_correction(train, **model_args))
    skipped = per_family.pop("skipped", [])
    held, learned, prior, inside = [], [], [], []
    for g, (test, pred, sigma) in per_family.items():
        inside += [abs(math.log(p / s.measured_us)) <= sg for s, p, sg in zip(test, pred, sigma)]
        held += test
        learned += pred
        prior += [s.prior_us for s in test]
    out = {"grouping": grouping, "folds": len(per_family), "skipped": skipped,
           "learned": score(held, learned), "prior": score(held, prior)}
    out["learned"]["within_sigma"] = float(np.mean(inside)) if inside else None
    return out


def transfer(train, test) -> dict:
    """Fit on one device kind's samples, score on another's bench-harness samples (no fold needed: the
    devices differ), next to the prior on the same samples."""
    test = [s for s in test if s.harness == "bench"]
    if len(train) < 2 or not test:
        return {"learned": score([], []), "prior": score([], [])}
    corr, _, _ = Correction().fit(train).predict(test)
    return {"learned": score(test, [s.prior_us * math.exp(c) for s, c in zip(test, corr)]),
            "prior": score(test, [s.prior_us for s in test])}
