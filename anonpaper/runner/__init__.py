"""The study runner: profiles, papermill execution, results records, artifact cache, book assembly.

Notebook-side API (import cheaply; papermill is only imported by the executing side):

    from anonpaper.runner import Results
    results = Results("01_snow_vs_snow", parameters=dict(SEED=SEED, ...))
    results.metric("attacker_accuracy/original", 0.81)
    results.claim("snow-privacy", "Attacker accuracy falls as p rises", paper="0.83 -> 0.62", ours=..., holds=...)
    results.save()
"""

from anonpaper.runner.record import Results
from anonpaper.runner.studies import study_config

__all__ = ["Results", "study_config"]
