"""Every method on one privacy-utility footing: the trivial baselines, Snow, VS-Snow, k-same pixel averaging and the
learned methods (k-SALSA, paper 1's vessel edit and StyleSpace, GMIA, the disentanglement identity swap), swept over
their knobs on a fundus and a chest X-ray phantom cohort and audited by one suite (:mod:`anonpaper.audit`).

The chapter ``notebooks/07_tradeoffs.ipynb`` imports this face: :class:`Config`, :func:`run` (the pipeline), the
tables, the claims and the figures.
"""

from anonpaper.experiments.tradeoffs.analysis import (THREAT_LABELS, THREATS, instruments_table,
                                                      learned_methods_markdown, learned_methods_metrics, lesson_table,
                                                      matched_gains, metrics, pareto_front, points, ranking_table,
                                                      seconds_table)
from anonpaper.experiments.tradeoffs.claims import evaluate_claims
from anonpaper.experiments.tradeoffs.config import Config
from anonpaper.experiments.tradeoffs.figures import plot_examples, plot_tradeoff
from anonpaper.experiments.tradeoffs.pipeline import (METHOD_LABELS, MODALITIES, NEEDS, Outcome, Setting, run,
                                                      settings_for)

__all__ = ["Config", "METHOD_LABELS", "MODALITIES", "NEEDS", "Outcome", "Setting", "THREATS", "THREAT_LABELS",
           "evaluate_claims", "instruments_table", "learned_methods_markdown", "learned_methods_metrics",
           "lesson_table", "matched_gains", "metrics", "pareto_front",
           "plot_examples", "plot_tradeoff", "points", "ranking_table", "run", "seconds_table", "settings_for"]
