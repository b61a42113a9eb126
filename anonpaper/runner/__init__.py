"""The study runner: profiles, papermill execution, results records, artifact cache, book assembly.

Notebook-side API (import cheaply; papermill is only imported by the executing side):

    from anonpaper.runner import Results
    results = Results("01_snow_vs_snow", parameters=dict(SEED=SEED, ...))
    results.metric("attacker_accuracy/original", 0.81)
    results.add_claims(chapter.evaluate_claims(outcome))   # built with anonpaper.experiments.claims.decide
    results.save()

The names are imported on first use (PEP 562), so the command line's ``anonpaper.runner.studies`` does not pull in
the records' claims and the libraries behind them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anonpaper.runner.record import Results
    from anonpaper.runner.studies import study_config

_HOMES = {"Results": "anonpaper.runner.record", "study_config": "anonpaper.runner.studies"}
__all__ = ["Results", "study_config"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
