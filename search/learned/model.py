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
                                            max_features=0.5, random_state=self.seed, n_jobs=2).fit(x, y)
        self.nodes = _Forest(self.forest)
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
        # |z - t|^2 = |z|^2 + |t|^2 - 2 z.t: one product instead of a (queries x samples x features) array
        sq = (z * z).sum(1)[:, None] + self._train_sq[None, :] - 2.0 * (z @ self.train.T)
        return np.sqrt(np.maximum(sq.min(axis=1), 0.0)) / self.spacing

    @property
    def _train_sq(self) -> np.ndarray:
        if getattr(self, "_sq", None) is None:
            self._sq = (self.train * self.train).sum(1)
        return self._sq

    def __getstate__(self) -> dict:
        """Pickled without the scikit-learn forest: its trees as plain arrays (_Forest) predict the same values,
        and loading them does not import scikit-learn (seconds on a loaded machine; the search loads this on
        every default run)."""
        state = dict(self.__dict__)
        state["forest"] = None
        state.pop("_sq", None)
        return state

    def predict(self, samples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log correction, log-space sigma, distance) per sample."""
        if getattr(self, "nodes", None) is None:
            raise RuntimeError("fit the correction first")
        x = matrix(samples)
        per_tree = self.nodes.predict(x)
        mean, spread = per_tree.mean(axis=0), per_tree.std(axis=0)
        dist = self.distance(x)
        trust = np.exp(-np.maximum(dist - 1.0, 0.0))      # 1 inside the data, -> 0 far outside it
        sigma = np.sqrt(spread ** 2 + self.residual ** 2) * np.maximum(dist, 1.0)
        return mean * trust, sigma, dist


class _Forest:
    """A fitted forest's trees as arrays, all trees walked together: per-tree predictions equal to each
    ``DecisionTreeRegressor.predict`` (the same float32 inputs, ``<=`` against the same thresholds, the same
    leaf means), without scikit-learn's per-call validation (~1 ms per tree per call) or its import."""

    def __init__(self, forest):
        trees = [e.tree_ for e in forest.estimators_]
        sizes = [t.node_count for t in trees]
        self.roots = np.cumsum([0] + sizes[:-1]).astype(np.int64)
        off = np.repeat(self.roots, sizes)
        left = np.concatenate([t.children_left for t in trees]).astype(np.int64)
        right = np.concatenate([t.children_right for t in trees]).astype(np.int64)
        self.leaf = left < 0
        self.left = np.where(self.leaf, -1, left + off)
        self.right = np.where(self.leaf, -1, right + off)
        self.feature = np.concatenate([t.feature for t in trees]).astype(np.int64)
        self.threshold = np.concatenate([t.threshold for t in trees]).astype(np.float64)
        self.value = np.concatenate([t.value[:, 0, 0] for t in trees]).astype(np.float64)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(trees, samples) predictions."""
        x = np.asarray(x, dtype=np.float32).astype(np.float64)      # scikit-learn's trees compare float32 inputs
        node = np.repeat(self.roots[:, None], len(x), axis=1)
        cols = np.arange(len(x))[None, :].repeat(len(self.roots), axis=0)
        while True:
            inner = ~self.leaf[node]
            if not inner.any():
                break
            n, c = node[inner], cols[inner]
            go_left = x[c, self.feature[n]] <= self.threshold[n]
            node[inner] = np.where(go_left, self.left[n], self.right[n])
        return self.value[node]


def log_error(pred, meas) -> float:
    return float(np.mean([abs(math.log(p / m)) for p, m in zip(pred, meas)]))
