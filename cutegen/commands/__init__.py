"""Subcommands of the ``cutegen`` CLI.

Each module here exposes ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
A module may instead expose ``SUBCOMMANDS``: a dict name -> (help, add_arguments, run) for a
command with its own subcommands (``cutegen check tensor-map``).
"""
COMMANDS = ("check", "search", "generate", "build", "regen", "validate", "bench", "db", "tune", "pack", "attention")
