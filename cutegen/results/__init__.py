"""The results database: every measurement kept, per device kind (issue 11, part 1).

``ResultsDB(path=None)``: the user's SQLite file (``$CUTEGEN_RESULTS_DB``, else the platformdirs user
cache dir ``cutegen/results.sqlite``) merged with the repository's read-only seed.
"""
from .db import ResultsDB, default_path
from .device import KINDS, DeviceKind, device_kind, sm_count_of
from .measurement import Measurement, problem_key

__all__ = ["ResultsDB", "Measurement", "device_kind", "default_path", "DeviceKind", "KINDS", "sm_count_of",
           "problem_key"]
