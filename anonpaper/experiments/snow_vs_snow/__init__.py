"""Paper 2 ("De-identification and Obfuscation of Gender Attributes From Retinal Scans"): Snow vs VS-Snow.

The chapter ``notebooks/01_snow_vs_snow.ipynb`` imports this face: :class:`Config` (its parameters),
:func:`load_data` and :func:`run_experiment` (the pipeline), the tables and trade-off statistics, the claims and
the figures.
"""

from anonpaper.experiments.snow_vs_snow.analysis import (PAPER_P_VALUES, PAPER_TABLES, matched_privacy_gain,
                                                         paper_vs_ours_table, scores_table, tradeoff_points,
                                                         vessel_share_of_drop)
from anonpaper.experiments.snow_vs_snow.claims import evaluate_claims
from anonpaper.experiments.snow_vs_snow.config import Config
from anonpaper.experiments.snow_vs_snow.figures import plot_examples, plot_saliency, plot_tradeoff
from anonpaper.experiments.snow_vs_snow.pipeline import (METHOD_LABELS, METHODS, Outcome, load_data, obfuscate,
                                                         predict_vessels, run_experiment, score, seed_summary,
                                                         seeded_versions, segmenter_check, train_task_classifier,
                                                         train_vessel_segmenter)

__all__ = ["Config", "Outcome", "load_data", "run_experiment", "obfuscate", "predict_vessels", "score",
           "seed_summary", "seeded_versions", "segmenter_check", "train_task_classifier", "train_vessel_segmenter",
           "METHODS", "METHOD_LABELS",
           "PAPER_P_VALUES", "PAPER_TABLES", "paper_vs_ours_table", "scores_table", "tradeoff_points",
           "matched_privacy_gain", "vessel_share_of_drop", "evaluate_claims", "plot_examples", "plot_saliency",
           "plot_tradeoff"]
