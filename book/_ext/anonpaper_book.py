"""Small fixes to the rendered pages, found by tests/test_book_browser.py (a local Sphinx extension).

- sphinx-thebe 0.3.1 registers its inline configuration script once per ``env-before-read-docs``, which the
  Jupyter Book build emits more than once, so every page declared ``const THEBE_JS_URL`` twice: a JavaScript
  SyntaxError on every page. Identical scripts are kept once.
- pydata-sphinx-theme writes ``data-mode=""`` when no ``default_mode`` is in the page context, and its script then
  logs "Got invalid theme mode" as a console error on a reader's first visit; the mode defaults to "auto".
- Sphinx loads MathJax from a CDN, so a reader without network saw raw TeX. MathJax 3.2.2's files come with the
  package ``django-static-mathjax`` (only the static files; it needs no Django); the build copies the bundle Sphinx
  would fetch (``es5/tex-mml-chtml.js``) and the components it loads on demand (TeX extensions, CHTML fonts, menu)
  into ``_static/mathjax/`` and points ``mathjax_path`` there. Without that package the CDN stays.
"""

from __future__ import annotations

import shutil
from importlib import metadata
from pathlib import Path

MATHJAX_BUNDLE = "tex-mml-chtml.js"  # what Sphinx's default MathJax 3 URL names
MATHJAX_PARTS = (MATHJAX_BUNDLE, "input", "output", "ui", "a11y")  # not sre/ (speech, 4 MB) or other bundles
MATHJAX_STATIC = "mathjax"  # folder under the book's _static/
LOCAL_MATHJAX_PATH = f"{MATHJAX_STATIC}/{MATHJAX_BUNDLE}"  # mathjax_path relative to _static/


def local_mathjax() -> Path | None:
    """MathJax 3's ``es5/`` folder from the installed ``django-static-mathjax``, or None."""
    try:
        es5 = Path(metadata.distribution("django-static-mathjax").locate_file("mathjax/static/mathjax/es5"))
    except metadata.PackageNotFoundError:
        return None
    return es5 if (es5 / MATHJAX_BUNDLE).is_file() else None


def _use_local_mathjax(app, config) -> None:
    from sphinx.ext.mathjax import MATHJAX_URL

    if local_mathjax() is not None and config.mathjax_path == MATHJAX_URL:  # a user's own choice stays
        config.mathjax_path = LOCAL_MATHJAX_PATH


def _copy_mathjax(app, exception) -> None:
    es5 = local_mathjax()
    if exception is not None or es5 is None or app.builder.format != "html" or \
            app.config.mathjax_path != LOCAL_MATHJAX_PATH:
        return
    target = Path(app.outdir) / "_static" / MATHJAX_STATIC
    target.mkdir(parents=True, exist_ok=True)
    for part in MATHJAX_PARTS:
        source = es5 / part
        if source.is_dir():
            shutil.copytree(source, target / part, dirs_exist_ok=True)
        elif source.is_file():
            shutil.copy2(source, target / part)


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
    app.setup_extension("sphinx.ext.mathjax")  # its config values exist before ours reads them
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_mathjax)
    app.connect("html-page-context", _clean_page_context, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
