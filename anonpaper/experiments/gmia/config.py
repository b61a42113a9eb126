"""The GMIA chapter's parameters: one frozen config, defaults = the ``quick`` profile."""

from __future__ import annotations

import math
from dataclasses import dataclass

from anonpaper.experiments.chapter import ChapterConfig, parameter

PROFILES = ("smoke", "quick", "paper")


@dataclass(frozen=True)
class Config(ChapterConfig):
    """Everything that determines the chapter's cohort, networks and numbers (see the help texts)."""

    seed: int = parameter(0, "Seed of every random draw (cohort, networks, bootstrap).")
    generators_profile: str = parameter("quick", "Profile of the generators chapter (02_generators) whose chest "
                                                 "X-ray generator this chapter uses: its StyleGAN2 for E-training, "
                                                 "its architecture and image size for co-training ('smoke', "
                                                 "'quick' or 'paper').")
    cxr_patients: int = parameter(40, "Phantom chest X-ray patients (the paper: 1,599 MIMIC-CXR patients with at "
                                      "least 20 images each).")
    images_per_patient: int = parameter(12, "Images per phantom patient (the paper keeps patients with >= 20 "
                                            "images; identity verification needs several per patient).")
    identity_backbone: str = parameter("small_cnn", "Backbone of the identity networks: E_id, the fixed "
                                                    "verification attacker and the adaptive attacker (the paper: "
                                                    "iResNet-50 with ArcFace).")
    identity_dim: int = parameter(64, "Identity embedding size (the paper: 512).")
    identity_epochs: int = parameter(20, "Epochs of every identity network (ArcFace s=64, m=0.5).")
    independent_backbone: str = parameter("resnet10t", "Backbone of the independent verification attacker: "
                                                       "another architecture than E_id's, trained on the real "
                                                       "training images with another seed, so that linkability is "
                                                       "not measured by E_id's sibling alone.")
    utility_backbone: str = parameter("small_cnn", "Backbone of the multi-label finding classifiers: E_ut and the "
                                                   "utility classifiers (the paper: DenseNet-121).")
    utility_epochs: int = parameter(15, "Epochs of every finding classifier.")
    lpips_epochs: int = parameter(10, "Epochs of the cohort-trained lung U-Net whose feature taps give the domain "
                                      "LPIPS (loss and metric; the paper: VGG LPIPS).")
    co_training_kimg: float = parameter(10.0, "Thousands of real images shown to the co-training of E, S and D "
                                              "from scratch (quick: about 60 s/kimg on one CPU thread at 64 px). "
                                              "History: quick first gave co-training 4 kimg, where it "
                                              "lost to E-training (2 kimg against the 20 kimg generator); it was "
                                              "then raised to 12 kimg while E-training kept 2, which favoured "
                                              "co-training; E-training then got the same budget (ENCODER_KIMG); "
                                              "both were cut to 10 kimg when the chapter took 48 minutes on an idle "
                                              "2-core host, over the 45 allowed.")
    encoder_kimg: float = parameter(10.0, "Thousands of real images shown to E-training (E alone against the "
                                          "frozen generator; about 22 s/kimg on one CPU thread at 64 px): as many "
                                          "encoder updates as co-training's, so Table 1 compares the schemes at a "
                                          "matched budget (the claim is undecided when E-training gets fewer).")
    projection_batch_size: int = parameter(8, "Images per projection-training step (multiple of 4).")
    steps: int = parameter(50, "Adam steps of the latent optimisation per image (the paper: 1000; quick: about "
                               "80 ms per image and step on one CPU thread at 64 px).")
    learning_rate: float = parameter(0.05, "Adam learning rate of the latent optimisation, betas (0, 0.99) (the "
                                           "paper: 0.01 over 1000 steps; at 0.01 the CPU profiles' 25 steps moved "
                                           "the identity cosine from about 0.5 to 0.1 only, so m = -0.5 and -0.7 "
                                           "never bound, and 30 steps at 0.05 reached about -0.33: fewer, larger "
                                           "steps).")
    margin: float = parameter(-0.7, "Identity margin m of L_id = max(0, cos - m) of the main setting (the "
                                    "paper: -0.7).")
    margins: tuple = parameter((0.0, -0.5, -0.7), "Margins of the ablation, from loosest to strictest (the "
                                                  "paper: 0, -0.5, -0.7).")
    anonymise_batch_size: int = parameter(32, "Images optimised together (the result does not depend on it, up to "
                                              "float rounding; two CPU threads at 64 px take about 8.5 ms per "
                                              "image and step at 32, 14 at 64 and 18 at 128).")
    attacker_epochs: int = parameter(30, "Epochs of each membership-inference attacker.")
    judge_seeds: int = parameter(2, "Training seeds of the judges (the fixed, independent and adaptive attackers, "
                                    "the finding classifiers of the utility table, the membership attackers; "
                                    "quick: 2, as in the vascular chapter, cut from 3 with the projection "
                                    "budgets; paper: 3): every claim is decided with each seed's judges and "
                                    "the effects averaged, their spread added to the SE. E_id and E_ut, which "
                                    "the method optimises against, are trained once.")
    membership_folds: int = parameter(4, "Patient folds of the membership attack: each fold's images are scored by "
                                         "an attacker trained on two or more other folds and selected on another, "
                                         "so no attacker is trained or selected on the images it attacks (at "
                                         "least 3; fewer when the test split has fewer patients).")
    utility_drop_max: float = parameter(0.05, "Retention margin: the largest macro-AUROC loss (real -> anonymised "
                                              "training set) for which the utility claim can hold, fixed before "
                                              "the run (the paper: 0.774 -> 0.737, a loss of 0.037).")
    unlinkable_margin: float = parameter(0.1, "Equivalence margin of the unlinkability claims: the largest "
                                              "distance from chance (|outer AUC - 0.5|, |own closer - 0.5|) that "
                                              "still counts as unlinkable; 0.1 keeps an attacker that is right on "
                                              "60 % of pairs, either way, out of 'unlinkable'.")
    membership_margin: float = parameter(0.1, "Equivalence margin of the membership claim: the largest |balanced "
                                              "accuracy - 0.5| on held-out members and non-members that counts as "
                                              "chance.")
    identity_min_auc: float = parameter(0.75, "Floor of every identity network used as an attacker: its "
                                              "verification AUC on pairs of held-out images of its own domain "
                                              "(real test pairs; an adaptive attacker: anonymised test pairs). An "
                                              "attacker below it measures nothing, and its claims are undecided.")
    utility_min_auroc: float = parameter(0.65, "Floor of the finding classifier trained on real images: macro "
                                               "AUROC on the real test set (the paper's: 0.774). Below it the "
                                               "utility claims are undecided.")
    membership_min_accuracy: float = parameter(0.6, "Floor of the membership attacker: balanced accuracy on "
                                                    "held-out REAL members and non-members (patients it was neither "
                                                    "trained nor selected on). An attacker that cannot tell them "
                                                    "apart on real images says nothing by failing on anonymised "
                                                    "ones.")
    projector_min_gain_db: float = parameter(3.0, "Floor of the co-trained projector: PSNR of its reconstructions "
                                                  "of the test images minus the PSNR of the cohort's mean training "
                                                  "image against them, in dB. 3 dB = half the pixel variance "
                                                  "around the mean image reconstructed; a mean image, or a blur "
                                                  "that keeps only the lung outlines (at 32 px: sigma 3 px, +2.4 "
                                                  "dB), does not pass. Utility claims rest on it.")
    margin_min_reached: float = parameter(0.5, "Floor of the margin ablation: the share of test images whose final "
                                               "E_id cosine reached each margin stricter than the loosest. Below "
                                               "it the margin did not bind (the hinge never switched off), so the "
                                               "stricter settings ran the same optimisation as an unbounded one, "
                                               "and the margin claims are undecided.")
    psnr_match_tolerance: float = parameter(0.5, "Largest PSNR gap (dB) between GMIA's main setting and a blur or "
                                                 "pixelation baseline for their comparison to count as 'at equal "
                                                 "PSNR' (a baseline that cannot reach the target is not matched).")
    min_test_images: int = parameter(80, "Smallest test set (images) on which a claim is decided.")
    bootstrap: int = parameter(200, "Patient-clustered bootstrap resamples for standard errors.")
    device: str | None = parameter(None, "Device: None picks CUDA when available, else 'cpu' or 'cuda:N'.")

    def __post_init__(self):
        # Imported here, not at the top: `anonpaper list -v` reads this class without importing torch.
        from anonpaper.models.classifiers import CLASSIFIER_NAMES

        object.__setattr__(self, "margins", tuple(float(m) for m in self.margins))
        checks = [
            (isinstance(self.seed, int) and self.seed >= 0, f"SEED must be a non-negative integer, got {self.seed!r}"),
            (self.generators_profile in PROFILES,
             f"GENERATORS_PROFILE must be one of {PROFILES}, got {self.generators_profile!r}"),
            (isinstance(self.cxr_patients, int) and self.cxr_patients >= 8,
             f"CXR_PATIENTS must be an integer >= 8 (train, val and test need patients), got {self.cxr_patients!r}"),
            (isinstance(self.images_per_patient, int) and self.images_per_patient >= 2,
             f"IMAGES_PER_PATIENT must be an integer >= 2 (verification pairs), got {self.images_per_patient!r}"),
            (self.identity_backbone in CLASSIFIER_NAMES,
             f"IDENTITY_BACKBONE must be one of {CLASSIFIER_NAMES}, got {self.identity_backbone!r}"),
            (self.utility_backbone in CLASSIFIER_NAMES,
             f"UTILITY_BACKBONE must be one of {CLASSIFIER_NAMES}, got {self.utility_backbone!r}"),
            (self.independent_backbone in CLASSIFIER_NAMES and self.independent_backbone != self.identity_backbone,
             f"INDEPENDENT_BACKBONE must be one of {CLASSIFIER_NAMES} and differ from IDENTITY_BACKBONE "
             f"({self.identity_backbone!r}), got {self.independent_backbone!r}"),
            (isinstance(self.identity_dim, int) and self.identity_dim >= 2,
             f"IDENTITY_DIM must be an integer >= 2, got {self.identity_dim!r}"),
            (isinstance(self.projection_batch_size, int) and self.projection_batch_size >= 4
             and self.projection_batch_size % 4 == 0,
             f"PROJECTION_BATCH_SIZE must be a positive multiple of 4, got {self.projection_batch_size!r}"),
            (isinstance(self.co_training_kimg, (int, float)) and self.co_training_kimg > 0,
             f"CO_TRAINING_KIMG must be a number > 0, got {self.co_training_kimg!r}"),
            (isinstance(self.encoder_kimg, (int, float)) and self.encoder_kimg > 0,
             f"ENCODER_KIMG must be a number > 0, got {self.encoder_kimg!r}"),
            (isinstance(self.learning_rate, (int, float)) and self.learning_rate > 0,
             f"LEARNING_RATE must be > 0, got {self.learning_rate!r}"),
            (isinstance(self.margin, (int, float)) and -1.0 <= self.margin <= 1.0,
             f"MARGIN must be a number in [-1, 1], got {self.margin!r}"),
            (len(self.margins) >= 2 and all(-1.0 <= m <= 1.0 for m in self.margins)
             and list(self.margins) == sorted(self.margins, reverse=True) and len(set(self.margins)) == len(self.margins),
             f"MARGINS must be at least two distinct values in [-1, 1] from loosest (largest) to strictest, got "
             f"{self.margins!r}"),
            (float(self.margin) in self.margins, f"MARGIN ({self.margin!r}) must be one of MARGINS {self.margins!r}"),
            (isinstance(self.membership_folds, int) and not isinstance(self.membership_folds, bool)
             and self.membership_folds >= 3,
             f"MEMBERSHIP_FOLDS must be an integer >= 3 (train, select, attack), got {self.membership_folds!r}"),
            (isinstance(self.projector_min_gain_db, (int, float)) and math.isfinite(self.projector_min_gain_db),
             f"PROJECTOR_MIN_GAIN_DB must be a finite number (dB), got {self.projector_min_gain_db!r}"),
            (isinstance(self.psnr_match_tolerance, (int, float)) and self.psnr_match_tolerance > 0,
             f"PSNR_MATCH_TOLERANCE must be a number > 0 (dB), got {self.psnr_match_tolerance!r}"),
            (isinstance(self.min_test_images, int) and self.min_test_images >= 1,
             f"MIN_TEST_IMAGES must be a positive integer, got {self.min_test_images!r}"),
            (isinstance(self.bootstrap, int) and self.bootstrap >= 0,
             f"BOOTSTRAP must be a non-negative integer, got {self.bootstrap!r}"),
        ]
        for name in ("utility_drop_max", "unlinkable_margin", "membership_margin", "identity_min_auc",
                     "utility_min_auroc", "membership_min_accuracy", "margin_min_reached"):
            value = getattr(self, name)
            checks.append((isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1,
                           f"{name.upper()} must lie in (0, 1), got {value!r}"))
        for name in ("identity_epochs", "utility_epochs", "lpips_epochs", "steps", "anonymise_batch_size",
                     "attacker_epochs", "judge_seeds"):
            value = getattr(self, name)
            checks.append((isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                           f"{name.upper()} must be a positive integer, got {value!r}"))
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def kimg_steps(self, kimg: float) -> int:
        """Training steps that show ``kimg`` thousand images at ``projection_batch_size`` (at least 1)."""
        return max(1, int(round(kimg * 1000 / self.projection_batch_size)))
