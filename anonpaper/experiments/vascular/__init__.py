"""Paper 1 ("Vascular structure de-identification of fundus images by latent code manipulation", Zhao et al.,
Biomedical Optics Express 14(10):5466, 2023): S-space channel editing of a fundus StyleGAN3-T (at ``quick``, of
the StyleGAN2: ``Config.generator``).

The chapter ``notebooks/03_vascular_sspace.ipynb`` imports this face: :class:`Config`, :func:`run` (the pipeline,
on the generators chapter's fundus generator), the paper-beside-ours tables, the claims and the figures.
"""

from anonpaper.experiments.vascular.analysis import (PAPER_TABLE2, PAPER_TABLE3, discussion, dropped_tradeoff_metrics,
                                                     generator_table, instruments_table, layer_table, missing_reasons,
                                                     references_table, seconds_table, speed_table, sweep_table, table2,
                                                     table3, top_channels_table, tradeoff_inputs, tradeoff_table)
from anonpaper.experiments.vascular.claims import evaluate_claims
from anonpaper.experiments.vascular.config import Config
from anonpaper.experiments.vascular.figures import (plot_ablation, plot_channel_edits, plot_gradient, plot_methods,
                                                    plot_metrics_by_strength, plot_privacy_utility, plot_scores,
                                                    plot_strengths, plot_tradeoff)
from anonpaper.experiments.vascular.pipeline import ABLATIONS, CONTROLS, METHODS, Outcome, run

__all__ = ["ABLATIONS", "CONTROLS", "Config", "METHODS", "Outcome", "PAPER_TABLE2", "PAPER_TABLE3", "discussion",
           "dropped_tradeoff_metrics", "evaluate_claims", "generator_table", "instruments_table", "layer_table",
           "missing_reasons", "plot_ablation", "plot_channel_edits", "plot_gradient", "plot_methods",
           "plot_metrics_by_strength", "plot_privacy_utility", "plot_scores", "plot_strengths", "plot_tradeoff",
           "references_table", "run", "seconds_table", "speed_table", "sweep_table", "table2", "table3",
           "top_channels_table", "tradeoff_inputs", "tradeoff_table"]
