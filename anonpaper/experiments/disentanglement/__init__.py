"""Paper 5 ("Anonymizing medical case-based explanations through disentanglement", Montenegro & Cardoso).

The chapter ``notebooks/06_disentanglement.ipynb`` imports this face: :class:`Config`, :func:`load_data` and
:func:`run_experiment` (the pipeline), the paper-beside-ours tables, the claims and the figures.
"""

from anonpaper.experiments.disentanglement.analysis import (PAPER_TABLE2, PAPER_TABLE3, PAPER_TABLE4, PAPER_TABLE5,
                                                            instruments_table, objective_table, privacy_table,
                                                            recognition_table,
                                                            table2, table3, table4, table5)
from anonpaper.experiments.disentanglement.claims import evaluate_claims, too_small
from anonpaper.experiments.disentanglement.config import Config
from anonpaper.experiments.disentanglement.figures import (plot_examples, plot_explanations, plot_privacy_curve,
                                                           plot_training)
from anonpaper.experiments.disentanglement.pipeline import (ABLATIONS, DATASETS, EXPERIMENTS, DatasetArrays, Outcome,
                                                            data_summary, load_data, run_experiment)

__all__ = ["ABLATIONS", "Config", "DATASETS", "DatasetArrays", "EXPERIMENTS", "Outcome", "PAPER_TABLE2",
           "PAPER_TABLE3", "PAPER_TABLE4", "PAPER_TABLE5", "data_summary", "evaluate_claims", "instruments_table",
           "load_data", "objective_table", "plot_examples", "plot_explanations", "plot_privacy_curve",
           "plot_training", "privacy_table",
           "recognition_table", "run_experiment", "table2", "table3", "table4", "table5", "too_small"]
