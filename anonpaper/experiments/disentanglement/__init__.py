"""Paper 5 ("Anonymizing medical case-based explanations through disentanglement", Montenegro & Cardoso).

The chapter ``notebooks/06_disentanglement.ipynb`` imports this face: :class:`Config`, :func:`load_data` and
:func:`run_experiment` (the pipeline), the paper-beside-ours tables, the claims and the figures.
"""

from anonpaper.experiments.disentanglement.config import Config
from anonpaper.experiments.disentanglement.pipeline import (ABLATIONS, DATASETS, EXPERIMENTS, DatasetArrays, Outcome,
                                                            data_summary, load_data, run_experiment)

__all__ = ["ABLATIONS", "Config", "DATASETS", "DatasetArrays", "EXPERIMENTS", "Outcome", "data_summary", "load_data",
           "run_experiment"]
