"""Reading a small module of the package without running the ``__init__`` of the packages above it.

The command line must answer ``--help`` and ``list -v`` at once, yet the facts it prints live beside heavy code:
a chapter's parameters in ``anonpaper.experiments.<chapter>.config``, whose package ``__init__`` imports the
chapter's whole pipeline (torch, timm, matplotlib), and the method names in ``anonpaper.methods.registry``, whose
package imports the methods. Python runs every parent package's ``__init__`` before a submodule, so
:func:`package_inits_skipped` imports ``anonpaper`` sub-packages not imported yet as bare namespaces (their
``__init__`` is not run) and, on leaving, forgets every ``anonpaper`` module it imported, so a later ordinary
import builds them normally. Read what you need inside the block: the modules are gone after it.

Example:
    >>> import sys
    >>> with package_inits_skipped():
    ...     from anonpaper.experiments.cohorts.config import Config
    ...     names = [field.name for field in Config.parameter_fields()]
    >>> "seed" in names
    True
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from contextlib import contextmanager
from typing import Iterator

PACKAGE = "anonpaper"


class _BarePackageFinder(importlib.abc.MetaPathFinder):
    """Finds ``anonpaper`` sub-packages as namespaces: their modules import, their ``__init__`` does not run."""

    def find_spec(self, name, path, target=None):
        if not name.startswith(PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.submodule_search_locations is None:
            return None  # a plain module (or not ours): the ordinary import
        bare = importlib.machinery.ModuleSpec(name, None, is_package=True)
        bare.submodule_search_locations = list(spec.submodule_search_locations)
        return bare


@contextmanager
def package_inits_skipped() -> Iterator[None]:
    """Within the block, importing ``anonpaper.a.b.c`` runs ``c`` (and what it imports) but not the ``__init__``
    of ``anonpaper.a`` or ``anonpaper.a.b`` unless they were imported before; see the module docstring.

    Third-party modules imported inside the block stay imported (re-importing an extension module breaks it);
    only the ``anonpaper`` modules the block imported are forgotten, with the attributes that bound them to
    their parent packages.
    """
    before = set(sys.modules)
    finder = _BarePackageFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [name for name in sys.modules if name not in before and name.startswith(PACKAGE + ".")]:
            module = sys.modules.pop(name)
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
                delattr(sys.modules[parent], child)
