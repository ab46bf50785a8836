"""The learned correction: ln(measured / prior) as a function of the features, with how sure it is.

A random forest (scikit-learn): it fits ~500 samples in well under a second here, needs no scaling, and
outside the data it extrapolates flat instead of running away, which is what a correction to a physical
prior should do. How sure it is: the spread of its trees (disagreement where data is thin or noisy) and the
distance of the query to the nearest training sample, in units of the training samples' own spacing. Far
from every sample (distance > 1) the correction is shrunk toward zero, i.e. toward the prior.
"""
from __future__ import annotations

import math

import numpy as np

from .features import matrix

TREES = 100
MIN_LEAF = 3


class Correction:
    def __init__(self, trees: int = TREES, min_leaf: int = MIN_LEAF, seed: int = 0):
        self.trees, self.min_leaf, self.seed = trees, min_leaf, seed
        self.forest = None

    def fit(self, samples) -> "Correction":
        from sklearn.ensemble import RandomForestRegressor

        if len(samples) < 2:
            raise ValueError("a correction needs at least two samples")
        x = matrix(samples)
        y = np.log(np.array([s.measured_us for s in samples]) / np.array([s.prior_us for s in samples]))
        self.forest = RandomForestRegressor(n_estimators=self.trees, min_samples_leaf=self.min_leaf,
                                            max_features=0.5, random_state=self.seed, n_jobs=1).fit(x, y)
        self.mean = x.mean(axis=0)
        self.scale = np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
        self.train = (x - self.mean) / self.scale
        self.spacing = self._spacing()
        self.samples = len(samples)
        self.residual = float(np.sqrt(np.mean((self.forest.predict(x) - y) ** 2)))
        return self

    def _spacing(self) -> float:
        """Median distance from a training sample to its nearest other (distinct) sample."""
        t = np.unique(self.train, axis=0)
        if len(t) < 2:
            return 1.0
        d = np.sqrt(((t[:, None, :] - t[None, :, :]) ** 2).sum(-1))
        np.fill_diagonal(d, np.inf)
        return float(max(np.median(d.min(axis=1)), 1e-6))

    def distance(self, x: np.ndarray) -> np.ndarray:
        z = (x - self.mean) / self.scale
        d = np.sqrt(((z[:, None, :] - self.train[None, :, :]) ** 2).sum(-1)).min(axis=1)
        return d / self.spacing

    def predict(self, samples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log correction, log-space sigma, distance) per sample."""
        if self.forest is None:
            raise RuntimeError("fit the correction first")
        x = matrix(samples)
        per_tree = np.stack([t.predict(x) for t in self.forest.estimators_])
        mean, spread = per_tree.mean(axis=0), per_tree.std(axis=0)
        dist = self.distance(x)
        trust = np.exp(-np.maximum(dist - 1.0, 0.0))      # 1 inside the data, -> 0 far outside it
        sigma = np.sqrt(spread ** 2 + self.residual ** 2) * np.maximum(dist, 1.0)
        return mean * trust, sigma, dist


def log_error(pred, meas) -> float:
    return float(np.mean([abs(math.log(p / m)) for p, m in zip(pred, meas)]))
