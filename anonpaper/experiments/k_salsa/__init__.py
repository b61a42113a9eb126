"""Paper 4 ("k-SALSA: k-anonymous synthetic averaging of retinal images via local style alignment", Jeon et al.,
ECCV 2022).

The chapter ``notebooks/05_k_salsa.ipynb`` imports this face: :class:`Config`, :func:`run` (the pipeline, on the
generators chapter's fundus StyleGAN2), the tables, the claims and the figures.
"""

from anonpaper.experiments.k_salsa.analysis import (clusters_table, fidelity_gaps_table, fidelity_table,
                                                    instruments_table, inversion_table, privacy_table, timings_table,
                                                    utility_table)
from anonpaper.experiments.k_salsa.claims import evaluate_claims
from anonpaper.experiments.k_salsa.config import Config
from anonpaper.experiments.k_salsa.figures import plot_clusters, plot_reconstructions, plot_tradeoffs
from anonpaper.experiments.k_salsa.pipeline import METHODS, Outcome, run

__all__ = ["Config", "METHODS", "Outcome", "clusters_table", "evaluate_claims", "fidelity_gaps_table",
           "fidelity_table", "instruments_table", "inversion_table", "plot_clusters", "plot_reconstructions",
           "plot_tradeoffs", "privacy_table", "run", "timings_table", "utility_table"]
