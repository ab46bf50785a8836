"""Sphinx configuration for cutegen's documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html`` (CI does this with
``-W``: a warning fails the build). The CLI reference is generated from the argument parser
(sphinx-argparse), the Python reference from docstrings (autodoc), and the rule table from
``cutegen.legality.all_rules()`` (the ``cutegen-rules`` directive below), so none of them can drift.
"""
from __future__ import annotations

import os
import sys

from docutils.parsers.rst import Directive

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

project = "cutegen"
author = "cutegen developers"
copyright = "2026, cutegen developers"   # noqa: A001 - Sphinx's name
from cutegen import __version__ as release  # noqa: E402

version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
smartquotes = False                          # flags stay --flag, not an en dash
html_theme = "alabaster"
html_static_path: list[str] = []
suppress_warnings = ["myst.xref_missing"]   # repository paths in the text are not documents


def _escape(text: str) -> str:
    """Text as reStructuredText that renders it literally (rule reasons hold *, |, _ and backticks)."""
    for ch in "\\*`|_[]<>":
        text = text.replace(ch, "\\" + ch)
    return " ".join(text.split())


class RulesDirective(Directive):
    """``.. cutegen-rules::`` -- one table row per legality rule: ID, contract, predicate, source.
    ``.. cutegen-rules:: attention``: the attention (CUTLASS 88 FMHA) rules of legality/attention.py."""

    optional_arguments = 1

    def run(self):
        if self.arguments and self.arguments[0] == "attention":
            from cutegen.legality.attention import all_attention_rules as all_rules
        else:
            from cutegen.legality import all_rules

        lines = [".. list-table::", "   :header-rows: 1", "   :widths: 22 10 40 28", "",
                 "   * - rule", "     - contract", "     - predicate", "     - source"]
        for rule in sorted(all_rules(), key=lambda r: (r.contract, r.id)):
            flag = "" if rule.enforced else " (documented, not enforced: a warning)"
            lines += [f"   * - ``{rule.id}``", f"     - {_escape(rule.contract)}",
                      f"     - {_escape(rule.summary)}{_escape(flag)}", f"     - {_escape(rule.source)}"]
        self.state_machine.insert_input(lines, "cutegen.legality.all_rules()")
        return []


def setup(app):
    app.add_directive("cutegen-rules", RulesDirective)
