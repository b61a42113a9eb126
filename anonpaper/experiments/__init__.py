"""The book's chapters as library code: one sub-package per chapter (``cohorts``, ``snow_vs_snow``, ...), each with
its config, pipeline, claims and figures (see CONTRIBUTING.md), plus the pattern they share: :mod:`.chapter`
(:class:`ChapterConfig`, :func:`parameter`) and :mod:`.claims` (:class:`Claim`, :func:`decide`).

Chapters are imported by name (``from anonpaper.experiments import snow_vs_snow``), not here, so that importing
one does not import all.
"""

from anonpaper.experiments.chapter import ChapterConfig, parameter
from anonpaper.experiments.claims import DECISION_Z, Claim, Instrument, decide, varies

__all__ = ["ChapterConfig", "Claim", "DECISION_Z", "Instrument", "decide", "parameter", "varies"]
