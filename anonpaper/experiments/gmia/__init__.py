"""Paper 3 (GMIA: "Generative Medical Image Anonymization Based on Latent Code Projection and Optimization", Li,
Ayache and Delingette, ISBI 2025) on the chest X-ray phantom.

The chapter ``notebooks/04_gmia.ipynb`` imports this face: :class:`Config`, :func:`run` (the pipeline), the
paper-beside-ours tables, the claims and the figures.
"""

from anonpaper.experiments.gmia.analysis import (PAPER_MIA, PAPER_TABLE1, PAPER_TABLE2, PAPER_TABLE3, PAPER_TABLE4,
                                                 attackers_table, budget_table, instruments_table, linkability_table,
                                                 margin_table, membership_table, not_reproduced,
                                                 privacy_utility_points, quality_table, singling_out_attackers_table,
                                                 singling_out_table, table1, training_table, utility_table)
from anonpaper.experiments.gmia.claims import evaluate_claims
from anonpaper.experiments.gmia.config import Config
from anonpaper.experiments.gmia.figures import plot_examples, plot_optimisation, plot_privacy_utility, plot_training
from anonpaper.experiments.gmia.pipeline import GMIAData, Outcome, data_summary, load_data, run, variants

__all__ = ["Config", "GMIAData", "Outcome", "PAPER_MIA", "PAPER_TABLE1", "PAPER_TABLE2", "PAPER_TABLE3",
           "PAPER_TABLE4", "attackers_table", "budget_table", "data_summary", "evaluate_claims", "instruments_table",
           "linkability_table", "load_data", "margin_table", "membership_table", "not_reproduced", "plot_examples",
           "plot_optimisation", "plot_privacy_utility", "plot_training", "privacy_utility_points", "quality_table",
           "run", "singling_out_attackers_table", "singling_out_table", "table1", "training_table", "utility_table",
           "variants"]
