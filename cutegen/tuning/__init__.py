"""``cutegen tune``: measure the search's top k on the GPU, keep every figure, write the measured best.

Two halves that may run on two machines:

- ``plan.make_plan`` (CPU; needs the search): the candidates of each problem (the search's top k,
  nvMatmulHeuristics' first legal pick, CUTLASS's default) rendered under a plan directory;
- ``measure.Tuner`` (GPU): build, time with cuBLAS in one process, validate, record in the results
  database, write the best; problems this device kind already measured come from the database.
"""
from .measure import Outcome, Tuner, records_document, records_lines
from .plan import CUTLASS_DEFAULT, Candidate, Plan, ProblemPlan, make_plan

__all__ = ["make_plan", "Plan", "ProblemPlan", "Candidate", "Tuner", "Outcome", "records_document", "records_lines",
           "CUTLASS_DEFAULT"]
