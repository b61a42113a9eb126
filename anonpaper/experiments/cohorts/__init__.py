"""The cohort chapter (``notebooks/00_cohorts.ipynb``): the phantoms, their realism against the literature, and the
checks the anonymization papers need from any dataset (identity recoverable, labels learnable, sex carried mostly
by the retinal vessels)."""

from anonpaper.experiments.cohorts.checks import (LearnabilityResult, identity_matching, identity_pairs,
                                                  inpaint_vessels, learnability, verification_on_heldout_patients)
from anonpaper.experiments.cohorts.claims import cxr_claims, iris_claims, retina_claims
from anonpaper.experiments.cohorts.config import Config
from anonpaper.experiments.cohorts.figures import mask_overlay, plot_cxr_examples, plot_iris_examples, plot_retina_examples
from anonpaper.experiments.cohorts.statistics import cxr_statistics, iris_statistics, retina_statistics

__all__ = ["Config", "LearnabilityResult", "cxr_claims", "cxr_statistics", "identity_matching", "identity_pairs",
           "inpaint_vessels", "iris_claims", "iris_statistics", "learnability", "mask_overlay", "plot_cxr_examples",
           "plot_iris_examples", "plot_retina_examples", "retina_claims", "retina_statistics",
           "verification_on_heldout_patients"]
