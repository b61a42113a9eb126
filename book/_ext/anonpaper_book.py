"""Small fixes to the rendered pages, found by tests/test_book_browser.py (a local Sphinx extension).

- sphinx-thebe 0.3.1 registers its inline configuration script once per ``env-before-read-docs``, which the
  Jupyter Book build emits more than once, so every page declared ``const THEBE_JS_URL`` twice: a JavaScript
  SyntaxError on every page. Identical scripts are kept once.
- pydata-sphinx-theme writes ``data-mode=""`` when no ``default_mode`` is in the page context, and its script then
  logs "Got invalid theme mode" as a console error on a reader's first visit; the mode defaults to "auto".
"""

from __future__ import annotations


def _clean_page_context(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if scripts:
        seen, unique = set(), []
        for script in scripts:
            # An inline script's filename is None or "" depending on who registered it: the same script.
            filename = getattr(script, "filename", None) or ""
            key = (filename, repr(sorted((getattr(script, "attributes", None) or {}).items())))
            if key not in seen:
                seen.add(key)
                unique.append(script)
        context["script_files"] = unique
    if not context.get("default_mode"):
        context["default_mode"] = "auto"


def setup(app):
    app.connect("html-page-context", _clean_page_context, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
