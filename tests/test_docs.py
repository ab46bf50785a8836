"""docs/ builds with warnings as errors, and its CLI reference holds every flag the parser has."""
from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _every_option(parser: argparse.ArgumentParser, prefix=("cutegen",)):
    """(command path, option string) for every optional argument of every (sub)command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _every_option(sub, prefix + (name,))
        elif action.option_strings and action.dest != "help":
            yield " ".join(prefix), max(action.option_strings, key=len)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs-html")
    # -W: a warning (a broken reference, bad markup in a docstring or a help string) fails the build.
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q",
                           str(ROOT / "docs"), str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_docs_build_without_warnings(built):
    for page in ("index", "cli", "api", "concepts/rules", "concepts/search", "concepts/packs",
                 "concepts/results", "concepts/dask", "concepts/kernels", "concepts/layout"):
        assert (built / f"{page}.html").is_file(), page


def test_the_cli_reference_lists_every_command_and_flag_of_the_parser(built):
    from cutegen.cli import build_parser
    from cutegen.commands import COMMANDS

    text = _text(built / "cli.html")
    options = list(_every_option(build_parser()))
    assert len(options) > 100          # every command loaded, not the "(unavailable here)" stand-ins
    missing = [f"{cmd} {opt}" for cmd, opt in options if opt not in text]
    assert missing == []
    for command in COMMANDS:
        assert re.search(rf"cutegen\s+{command}\s+\[-h\]", text), command   # its usage line
    assert "unavailable here" not in text


def test_the_api_reference_documents_every_public_function(built):
    import cutegen

    text = _text(built / "api.html")
    for name in cutegen.__all__:
        if name != "__version__":
            assert f"cutegen.{name}" in text, name


def test_the_rule_table_has_every_legality_rule(built):
    from cutegen.legality import all_rules

    text = _text(built / "concepts" / "rules.html")
    assert [r.id for r in all_rules() if r.id not in text] == []
