"""The ``cutegen`` command line: one subcommand per module of ``cutegen.commands``.

Only the module of the command being run is imported, so a machine without egglog (the GPU
machine) can still run ``cutegen build``, ``validate`` and ``bench``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .commands import COMMANDS
from .errors import CutegenError


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (the usage is one ``--help`` away): every bad-input path of
    the command line ends in exactly one line on standard error and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def _load(name: str):
    return importlib.import_module(f"cutegen.commands.{name}")


def _add_command(sub, name: str, mod) -> None:
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


def _build_parser(command: str | None) -> argparse.ArgumentParser:
    import cutegen
    parser = _Parser(prog="cutegen", description=cutegen.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"cutegen {cutegen.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command in COMMANDS:
        _add_command(sub, command, _load(command))
    else:  # help or an unknown word: list every command, importing what imports
        for name in COMMANDS:
            try:
                _add_command(sub, name, _load(name))
            except ImportError as e:
                sub.add_parser(name, help=f"(unavailable here: {e})")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The whole ``cutegen`` parser, every command loaded (the CLI reference in docs/ is generated from it)."""
    return _build_parser(None)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["generate"]  # the main job: generate a kernel for the default problem
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = _build_parser(command)
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
