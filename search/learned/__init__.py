"""A cost model that learns: the analytic model (search/cost.py) is the prior, a correction fitted on the
results database refines it per device kind, and every prediction says where it came from.

  samples.py    measurements -> training samples (completed configuration, prior, breakdown)
  features.py   what the correction sees of a problem, a configuration and the prior's breakdown
  model.py      the correction: a forest on ln(measured / prior), with its spread and distance to data
  predictor.py  measurement, else learned, else prior: what the search ranks by
  quality.py    cross-validation that holds out whole shape families (the fit sees the training split only;
                ``leaks`` poisons a fold to prove it); the figures bench/model_quality.py prints
  cache.py      fitted predictors kept per database content and code version (memory and disk)

What a default search ranks by (learned, measured or prior, for which device kind): ``cutegen.search.ranking``.
"""
from .device import rates
from .model import Correction
from .predictor import Prediction, Predictor

__all__ = ["Correction", "Prediction", "Predictor", "rates"]
