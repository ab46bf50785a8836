"""The ``cutegen`` command line: one subcommand per module of ``cutegen.commands``."""
from __future__ import annotations

import argparse
import importlib
import sys

from .commands import COMMANDS
from .errors import CutegenError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cutegen", description=__import__("cutegen").__doc__)
    parser.add_argument("--version", action="version", version=f"cutegen {__import__('cutegen').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"cutegen.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"cutegen.commands.{name}":
                continue  # not built yet
            raise
        if hasattr(mod, "SUBCOMMANDS"):
            p = sub.add_parser(name, help=mod.HELP)
            inner = p.add_subparsers(dest="subcommand", metavar="WHAT", required=True)
            for sname, (shelp, add, run) in mod.SUBCOMMANDS.items():
                sp = inner.add_parser(sname, help=shelp)
                add(sp)
                sp.set_defaults(_run=run)
        else:
            p = sub.add_parser(name, help=mod.HELP)
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    if not argv:
        argv = ["generate"]  # the main job: generate a kernel for the default problem
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except CutegenError as e:
        print(f"cutegen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
