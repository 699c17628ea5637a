"""Griffe extension for the API pages: the reST bits of the package's docstrings as Markdown.

The docstrings follow NumPy style with a few reStructuredText constructs that mkdocstrings
would otherwise print literally: Sphinx roles (``:class:`~pkg.Name```), ``.. math::`` and
``.. code-block:: python`` directives. This rewrites them, for the documentation only, into
inline code, ``$$`` display maths (rendered by MathJax through ``pymdownx.arithmatex``) and
fenced code blocks. Loaded from ``mkdocs.yml`` (``extensions: [docs/griffe_rst.py]``).
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|obj|exc|math):`([^`]+)`")
_DIRECTIVE = re.compile(r"^(\s*)\.\. (math|code-block|code)::\s*(\S*)\s*$")


def _role(match: re.Match) -> str:
    role, target = match.groups()
    if role == "math":
        return f"${target}$"
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def _directives(text: str) -> str:
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent, kind, language = match.groups()
        body, i = [], i + 1
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > len(indent)):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        block = textwrap.dedent("\n".join(body)).strip("\n").splitlines()
        fence = ["$$", *block, "$$"] if kind == "math" else [f"```{language}", *block, "```"]
        out.extend(indent + line if line else line for line in fence)
        out.append("")
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def rst_to_markdown(text: str) -> str:
    """Sphinx roles to inline code or maths, math/code directives to fenced blocks."""
    return _ROLE.sub(_role, _directives(text))


class RstToMarkdown(griffe.Extension):
    """Rewrite every loaded docstring with :func:`rst_to_markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
