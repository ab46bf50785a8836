"""What the search ranks by, per candidate: a measurement of exactly this problem and configuration on this
device kind, else the learned correction of the prior, else the prior alone; each says which it is."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .model import Correction
from .samples import complete, from_measurements, oriented, sample, samples_for  # noqa: F401 - sample: API

MIN_SAMPLES = 20      # fewer than this in all and the correction is not fitted: the prior answers
MIN_OWN = 5           # nor with fewer than this of the device kind itself: the search uses what the kind measured
MIN_PROBLEMS = 3


@dataclass(frozen=True)
class Prediction:
    us: float
    source: str               # "measured", "learned" or "prior"
    prior_us: float
    sigma: float | None       # log-space: the time is within us * exp(+-sigma) about 2 times in 3
    distance: float | None    # to the nearest training sample, in units of the samples' own spacing
    measurements: int = 0     # how many measurements a "measured" answer is the median of

    def to_dict(self) -> dict:
        out = {"us": round(self.us, 4), "source": self.source, "prior_us": round(self.prior_us, 4)}
        if self.sigma is not None:
            out["sigma"] = round(self.sigma, 4)
        if self.distance is not None:
            out["distance"] = round(self.distance, 3)
        if self.measurements:
            out["measurements"] = self.measurements
        return out


def _key(problem, config) -> tuple:
    return problem, config.to_json()


class Predictor:
    """Predictions for one device kind from the measurements (cutegen.results.Measurement) of it and of other
    kinds: the correction learns from all of them (each costed with its own kind's prior, the kind's SM count and
    bandwidth among the features), an exact measurement must be of this kind."""

    def __init__(self, device_kind: str, measurements, correction: Correction | None = None, fit: bool = True):
        self.device_kind = device_kind
        everything = from_measurements(measurements)
        samples = [s for s in everything if s.device_kind == device_kind]
        self.samples = len(samples)
        self.training_samples = len(everything)
        # exact measurements from the bench harness only: the others time the same kernel on another scale
        exact: dict[tuple, list[float]] = {}
        for s in samples:
            if s.harness == "bench":
                exact.setdefault(_key(s.problem, s.config), []).append(s.measured_us)
        self.exact = exact
        self._exact_problems = {p for p, _ in exact}    # a problem with none skips the per-candidate lookups
        problems = len({s.problem for s in everything})
        if (correction is None and fit and len(everything) >= MIN_SAMPLES and len(samples) >= MIN_OWN
                and problems >= MIN_PROBLEMS):
            correction = Correction().fit(everything)
        self.correction = correction

    @classmethod
    def from_db(cls, device_kind: str, db=None) -> "Predictor":
        from cutegen.results import ResultsDB

        db = db if db is not None else ResultsDB()
        return cls(device_kind, db.measurements(op="gemm"))

    @property
    def learned(self) -> bool:
        return self.correction is not None

    def predict(self, problem, candidates) -> list[Prediction]:
        """``candidates``: (completed config, stages) pairs; one Prediction each, in order."""
        samples = samples_for(problem, list(candidates), self.device_kind)
        out: list[Prediction | None] = [None] * len(samples)
        todo = []
        exact = problem in getattr(self, "_exact_problems", {problem})
        for i, s in enumerate(samples):
            times = self.exact.get(_key(problem, s.config)) if exact else None
            if times:
                spread = float(np.std(np.log(times))) if len(times) > 1 else None
                out[i] = Prediction(float(np.median(times)), "measured", s.prior_us, spread, 0.0, len(times))
            else:
                todo.append(i)
        if todo and self.correction is not None:
            corr, sigma, dist = self.correction.predict([samples[i] for i in todo])
            for j, i in enumerate(todo):
                out[i] = Prediction(samples[i].prior_us * math.exp(corr[j]), "learned", samples[i].prior_us,
                                    float(sigma[j]), float(dist[j]))
        for i in todo:
            if out[i] is None:
                out[i] = Prediction(samples[i].prior_us, "prior", samples[i].prior_us, None, None)
        return out  # type: ignore[return-value]

    def predict_measurement_config(self, problem, config) -> Prediction | None:
        """A prediction for a possibly partial configuration (completed as the rules complete it)."""
        problem, config = oriented(problem, config)
        done = complete(problem, config)
        return None if done is None else self.predict(problem, [done])[0]
