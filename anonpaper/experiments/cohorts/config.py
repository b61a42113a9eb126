"""The cohort chapter's parameters: one frozen config, defaults = the ``quick`` profile."""

from __future__ import annotations

from dataclasses import dataclass

from anonpaper.experiments.chapter import ChapterConfig, parameter


@dataclass(frozen=True)
class Config(ChapterConfig):
    """Sizes of the three phantom cohorts and of the checks run on them (see the help texts)."""

    seed: int = parameter(0, "Seed of every cohort and network in this chapter.")
    retina_patients: int = parameter(400, "Retina phantom: number of patients (each has several images).")
    retina_image_size: int = parameter(128, "Retina phantom: image size in pixels.")
    cxr_patients: int = parameter(120, "Chest X-ray phantom: number of patients.")
    cxr_image_size: int = parameter(128, "Chest X-ray phantom: image size in pixels.")
    cxr_findings: tuple = parameter(("pleural_effusion", "cardiomegaly"),
                                    "Chest X-ray findings whose learnability is measured (columns label_<finding>).")
    iris_subjects: int = parameter(60, "Iris phantom: number of subjects.")
    iris_image_size: int = parameter(96, "Iris phantom: image size in pixels.")
    iris_epochs: int = parameter(30, "Epochs of the iris identity classifier (a 60-way classifier from scratch needs "
                                     "more steps than the others).")
    iris_disease_subjects: int = parameter(240, "Subjects of the second iris cohort on which disease is learned and "
                                                "tested on held-out subjects (a subject-level label with about one "
                                                "diseased subject in four needs many more subjects than identity).")
    backbone: str = parameter("resnet10t", "Classifier backbone of the learnability checks (a timm ResNet-D name, or "
                                           "'small_cnn' for smoke runs only: its small receptive field and global "
                                           "pooling cannot learn identity; see the chapter text).")
    epochs: int = parameter(12, "Training epochs of the learnability checks (Adam 1e-3 with cosine annealing).")
    batch_size: int = parameter(32, "Mini-batch size of the learnability checks.")
    statistics_images: int = parameter(64, "Images used for the anatomical statistics tables.")
    identity_pairs: int = parameter(400, "Image pairs (half same-patient) for the identity-matching AUROC.")
    min_test_images: int = parameter(100, "Smallest test set on which a check is decided (smaller runs record the "
                                          "number but no verdict).")

    def __post_init__(self):
        positive = ("retina_patients", "retina_image_size", "cxr_patients", "cxr_image_size", "iris_subjects",
                    "iris_image_size", "iris_epochs", "iris_disease_subjects", "epochs", "batch_size",
                    "statistics_images", "identity_pairs")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name.upper()} must be a positive integer, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"SEED must be a non-negative integer, got {self.seed!r}")
        if not self.cxr_findings or not all(isinstance(name, str) for name in self.cxr_findings):
            raise ValueError(f"CXR_FINDINGS must be a non-empty list of finding names, got {self.cxr_findings!r}")
