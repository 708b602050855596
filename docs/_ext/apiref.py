"""``.. api-reference:: MODULE``: the API reference of every name in ``MODULE.__all__``, generated.

The directive emits an autosummary table of the names, then one autodoc entry per name (``autoclass`` with
its public members, ``autofunction``, or ``autodata``), so the page lists exactly what ``__all__`` states as
public and nothing else. Use it from MyST inside an ``{eval-rst}`` block (autodoc parses docstrings as
reStructuredText).
"""

from __future__ import annotations

from importlib import import_module
import inspect
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def public_names(module_name: str) -> list[str]:
    """The names ``module_name.__all__`` lists, in its order."""
    return list(import_module(module_name).__all__)


def _entry(module_name: str, name: str, value: Any) -> list[str]:
    target = f"{module_name}.{name}"
    if inspect.isclass(value):
        return [f".. autoclass:: {target}", "   :members:", ""]
    if callable(value):
        return [f".. autofunction:: {target}", ""]
    return [f".. autodata:: {target}", "   :no-value:", ""]


class ApiReference(SphinxDirective):
    """Document every name of a module's ``__all__``."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        module_name = self.arguments[0]
        module = import_module(module_name)
        names = public_names(module_name)
        lines = [f".. currentmodule:: {module_name}", "", ".. autosummary::", ""]
        lines += [f"   {name}" for name in names]
        lines.append("")
        for name in names:
            lines += _entry(module_name, name, getattr(module, name))
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(StringList(lines, source=f"<api-reference {module_name}>"), 0, container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive."""
    app.add_directive("api-reference", ApiReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
