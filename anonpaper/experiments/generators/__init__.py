"""The shared generators: fundus StyleGAN3-T and StyleGAN2, chest X-ray StyleGAN2 (grayscale), trained on the
phantom cohorts (the fundus ones on a real copy at ``DATA_ROOT`` when given), evaluated and cached, so the GAN
chapters load them with :func:`load_generator`, or shipped weights only with :func:`load_shipped_generator`.
``anonpaper generators train KIND`` (:mod:`.job`) trains one on a population the papers' size and exports it into
``weights/``; ``anonpaper generators curve PATH`` (:mod:`.curves`) reads a run's or a record's evaluations with the
vessel-tree check decided at each; ``anonpaper generate KIND`` (:mod:`.samples`) writes PNG samples from shipped
weights.

The chapter ``notebooks/02_generators.ipynb`` imports this face.
"""

from anonpaper.experiments.generators.analysis import (generators_table, labels_summary, labels_table, metrics_table,
                                                       protocols_table, spectrum_summary, weights_label)
from anonpaper.experiments.generators.claims import evaluate_claims
from anonpaper.experiments.generators.config import KINDS, Config
from anonpaper.experiments.generators.figures import (plot_curves, plot_masks, plot_nearest, plot_projections,
                                                      plot_samples, plot_spectra, plot_training, plot_truncation)
from anonpaper.experiments.generators.labels import LabelClassifier, label_classifier
from anonpaper.experiments.generators.pipeline import (DataCopyError, Outcome, TrainedGenerator, check_data, evaluate,
                                                       export_outcome, generate, generator_description, kind_cohort,
                                                       load_generator, load_shipped_generator, run, vessel_cohort)
from anonpaper.experiments.generators.weights import (WeightsForAnotherConfig, WeightsRefused, export_weights,
                                                      load_weights, read_weights)

__all__ = ["Config", "DataCopyError", "KINDS", "LabelClassifier", "Outcome", "TrainedGenerator",
           "WeightsForAnotherConfig", "WeightsRefused", "check_data", "evaluate", "evaluate_claims", "export_outcome",
           "export_weights", "generate",
           "generator_description", "generators_table", "kind_cohort", "label_classifier", "labels_summary",
           "labels_table", "load_generator", "load_shipped_generator", "load_weights", "metrics_table", "plot_curves",
           "plot_masks",
           "plot_nearest", "plot_projections", "plot_samples", "plot_spectra", "plot_training", "plot_truncation", "protocols_table",
           "read_weights", "run", "spectrum_summary", "vessel_cohort", "weights_label"]
