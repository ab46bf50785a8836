"""The Jinja2 environment every operation renders with, and the C string literal filter its templates use.

One environment (``templates/`` of the cutegen package, undefined names are errors, trailing newlines kept,
no autoescaping) so that a template of any operation renders the same way; jinja2 is imported on first use.
"""
from __future__ import annotations

import os

_ENV = None


def cstring(text: str) -> str:
    """A C string literal for ``text``, split into short lines. Printable ASCII stays as it is; a tab,
    another control character or a non-ASCII character (a pack entry's name, say) becomes the octal
    escapes of its UTF-8 bytes (three digits each, so a following digit cannot join the escape)."""
    out, line = [], ""
    for ch in text:
        esc = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}.get(ch)
        if esc is None:
            esc = ch if 32 <= ord(ch) < 127 else "".join(f"\\{b:03o}" for b in ch.encode("utf-8", "surrogatepass"))
        if len(line) + len(esc) > 96:
            out.append(f'"{line}"')
            line = ""
        line += esc
    out.append(f'"{line}"')
    return "\n    ".join(out)


def environment():
    """The shared environment over the package's ``templates/`` folder, with the ``cstring`` filter."""
    global _ENV
    if _ENV is None:
        import jinja2
        import cutegen.templates as templates_pkg
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.dirname(templates_pkg.__file__)),
                                 undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
        env.filters["cstring"] = cstring
        _ENV = env
    return _ENV
