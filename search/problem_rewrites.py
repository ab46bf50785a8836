"""Rewrites of the problem itself: which GEMMs compute the caller's D.

  swap AB    Mul(m, n, k, la, lb, lc) = Transpose(Mul(n, m, k, flip lb, flip la, flip lc))
             D = A B is D^T = B^T A^T: the operands exchange roles, every majorness flips (a row-major
             M x K matrix is a column-major K x M one), and the extent the tile's M mode runs along
             becomes N. Transpose(Transpose(p)) = p closes the class.

The root e-class of the problem then holds every orientation the kernel may compute; the search
reads them back (``orientations``) and searches the kernels of each. Layout codes: 0 row, 1 col.
The swap is offered only to the C++ backends; its legality (SWAP-AB-*) is judged like any rule.
"""
from __future__ import annotations

from .egg import Egg

PROBLEM_PROGRAM = """
(datatype Layout (Row) (Col) (Flip Layout))
(datatype Prob
  (Mul i64 i64 i64 Layout Layout Layout)
  (Transpose Prob))
(ruleset problem)
(rewrite (Flip (Row)) (Col) :ruleset problem)
(rewrite (Flip (Col)) (Row) :ruleset problem)
(rewrite (Mul m n k la lb lc) (Transpose (Mul n m k (Flip lb) (Flip la) (Flip lc))) :ruleset problem)
(rewrite (Transpose (Transpose p)) p :ruleset problem)
"""


def orientations(problem) -> list[bool]:
    """The orientations in the root e-class of ``problem``: False (as stated) and True (swapped).

    Read back from the e-graph: a ``Transpose(Mul(n, m, ...))`` e-node in the root's class is the
    swapped form. For a square problem with symmetric layouts both forms are one e-node; the swap is
    still offered (it is a different kernel only when the operand types or layouts differ)."""
    code = {"row": 0, "col": 1}
    la, lb, lc = (code[problem.layout_a], code[problem.layout_b], code[problem.layout_c])
    names = {0: "(Row)", 1: "(Col)"}
    with Egg() as egg:
        egg.run(PROBLEM_PROGRAM)
        root = (f"(Mul {problem.m} {problem.n} {problem.k} {names[la]} {names[lb]} {names[lc]})")
        egg.run(f"(let $root {root})")
        egg.run("(run-schedule (saturate (run problem)))")
        frozen = egg.freeze().functions
        root_class = next(r.output for r in frozen["$root"].rows) if "$root" in frozen else None
        forms = {False}
        for row in frozen["Transpose"].rows:
            if row.output == root_class:
                forms.add(True)
    return sorted(forms)
