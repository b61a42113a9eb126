"""The k-SALSA chapter's parameters: one frozen config, defaults = the ``quick`` profile."""

from __future__ import annotations

from dataclasses import dataclass

from anonpaper.experiments.chapter import ChapterConfig, parameter

BACKBONES = ("small_cnn", "resnet18d", "resnet26d", "resnet50d")
CLUSTER_UNITS = ("patient", "image")


@dataclass(frozen=True)
class Config(ChapterConfig):
    """Everything that determines the chapter's private set, synthetic images and numbers (see the help texts)."""

    seed: int = parameter(0, "Seed of every random draw (private subset, classifiers, attacker splits, bootstrap).")
    generators_profile: str = parameter("quick", "Profile of the generators chapter (02_generators) whose fundus "
                                                 "StyleGAN2 this chapter uses (its image size, cohort and training); "
                                                 "the paper: a 512 px StyleGAN2-ADA trained on EyePACS / APTOS.")
    private_images: int = parameter(206, "Private fundus images (drawn from the generator cohort's train split) that "
                                         "k-SALSA summarises; not a multiple of 5, 10 or 20, so clusters with a "
                                         "remainder occur (the paper: the whole training set; quick: 206, sized "
                                         "for the projector's cost, see PROJECTOR_STEPS).")
    k_values: tuple = parameter((2, 5, 10, 20), "Cluster sizes k of k-anonymity (the paper: 2, 5, 10, 20 ...).")
    cluster_unit: str = parameter("patient", "Unit of k-anonymity: 'patient' (each cluster holds at least k distinct "
                                             "patients and each patient's images stay in one cluster, so a release "
                                             "stands for k patients) or 'image' (the paper's clustering of images: "
                                             "a k = 2 cluster can be two photographs of one patient).")
    projector_steps: int = parameter(100, "Projector Adam steps per image, into W+ without noise maps (the paper "
                                          "inverts with a ReStyle/pSp encoder, 5 refinement iterations; the "
                                          "StyleGAN2-ADA projector recipe: 1000 steps; quick: 100, as the "
                                          "trade-off chapter's: one CPU thread projects about 15 image-steps/s "
                                          "into the 128 px `sg2-cpu128`, about 16 minutes on two threads for "
                                          "206 private images).")
    projector_batch: int = parameter(8, "Images projected together (independent Adam problems that share one "
                                        "random stream of exploration noise, so it acts like a seed besides "
                                        "setting speed and memory; benchmarks/results/projector.csv gives the "
                                        "speed of each batch size).")
    encoder_steps: int = parameter(100, "Training steps (16 cohort images each) of the W+ encoder compared with the "
                                        "projector (the paper inverts with a ReStyle/pSp encoder; 0 skips the "
                                        "encoder; quick: 100, the comparison only, since the release uses "
                                        "INVERSION).")
    encoder_refine_steps: int = parameter(25, "Projector steps started from the encoder's codes (the "
                                              "'encoder+projector' inversion).")
    inversion: str = parameter("projector", "Inversion whose W+ codes k-SALSA uses: 'projector', 'encoder' or "
                                            "'encoder+projector'.")
    alignment_steps: int = parameter(40, "Local style alignment Adam steps per cluster (the paper: 100).")
    alignment_lr: float = parameter(0.03, "Peak learning rate of the alignment, projector schedule (the paper: 0.1 "
                                          "over 100 steps; over 30-40 steps on the quick generator 0.03 reached a "
                                          "lower alignment loss than 0.1).")
    content_weight: float = parameter(1e2, "Weight of the content loss (cosine distance of pooled deep features to "
                                           "the members' reconstructions; the paper: 1e2).")
    style_weight: float = parameter(1e-6, "Weight of the patch-Gram style loss (the paper: 1e-6, on VGG19 conv1_2 "
                                          "Grams; on the cohort U-Net's first tap it also puts the style term at the "
                                          "content term's scale).")
    patch_grid: int = parameter(4, "Patches per side of the local style loss (the paper: a 4 x 4 grid).")
    classifier_backbone: str = parameter("small_cnn", "Backbone of the DR classifier trained on the synthetic images "
                                                      "(the paper: a ResNet-50).")
    classifier_size: int | None = parameter(64, "Side in pixels of the images the classifiers trained on a release "
                                                "see (the DR classifiers of the utility claims and the membership "
                                                "attacker, real and synthetic images alike, area-downsampled, never "
                                                "enlarged); None: the generator's side. The inversion, the "
                                                "alignment, the FD features and SIFT re-identification keep the "
                                                "generator's side (quick: 64, a quarter of the pixels of the 128 px "
                                                "releases, so that 39 DR classifiers and 12 attackers fit the quick "
                                                "budget; the paper's ResNet-50 reads its releases at full size).")
    classifier_epochs: int = parameter(30, "Epochs of each DR classifier (selected on its own training set: the "
                                           "recipient of the synthetic data has no real images).")
    classifier_seeds: int = parameter(3, "DR classifiers trained per release with different seeds; utility is their "
                                         "mean, and its SE includes their spread (a few dozen training images make "
                                         "one classifier's score depend on its seed).")
    attacker_budget: int = parameter(4000, "Training pairs shown to each membership-inference pair classifier "
                                           "(pairs x epochs), the same at every k: its epochs are this budget over "
                                           "its number of training pairs, at least 1 (about 15 epochs at quick), "
                                           "so a change of precision across k is not a change of training.")
    attacker_test_fraction: float = parameter(0.4, "Share of the clusters held out for scoring the membership attack "
                                                   "(the rest train and validate the attacker).")
    dr_min_qwk: float = parameter(0.4, "Floor of the DR classifiers trained on real images (the chapter's, on the "
                                       "private images, and the generators chapter's cohort classifier): quadratic "
                                       "weighted kappa on the real test images. Below it grading is not learnable at "
                                       "this size and the utility claims are undecided.")
    generator_label_min_qwk: float = parameter(0.4, "Floor of the generator: the generators chapter's real-trained DR "
                                                    "classifier must still grade the members' reconstructions G(w) "
                                                    "(QWK against their true grades). Below it the generator itself "
                                                    "loses the label, so no latent release can keep it, and the "
                                                    "utility claims are undecided.")
    min_test_images: int = parameter(40, "Smallest test set (real test images for utility, held-out candidate pool "
                                         "for membership) on which a claim is decided.")
    min_eval_images: int = parameter(20, "Fewest synthetic images at a k for its FD to count in the fidelity claim "
                                         "(FD is biased upwards on small sets; both methods have the same count).")
    bootstrap: int = parameter(200, "Bootstrap resamples for standard errors (patients for utility, synthetic images "
                                    "for FD).")
    device: str | None = parameter(None, "Device: None picks CUDA when available, else 'cpu' or 'cuda:N'.")

    def __post_init__(self):
        object.__setattr__(self, "k_values", tuple(self.k_values))
        checks = [
            (isinstance(self.seed, int) and self.seed >= 0, f"SEED must be a non-negative integer, got {self.seed!r}"),
            (self.generators_profile in ("smoke", "quick", "paper"),
             f"GENERATORS_PROFILE must be 'smoke', 'quick' or 'paper', got {self.generators_profile!r}"),
            (isinstance(self.private_images, int) and self.private_images >= 4,
             f"PRIVATE_IMAGES must be an integer >= 4, got {self.private_images!r}"),
            (len(self.k_values) >= 2 and all(isinstance(k, int) and k >= 2 for k in self.k_values)
             and list(self.k_values) == sorted(set(self.k_values)),
             f"K_VALUES must be at least two increasing integers >= 2, got {self.k_values!r}"),
            (isinstance(self.projector_steps, int) and self.projector_steps >= 1,
             f"PROJECTOR_STEPS must be a positive integer, got {self.projector_steps!r}"),
            (isinstance(self.projector_batch, int) and not isinstance(self.projector_batch, bool)
             and self.projector_batch >= 1,
             f"PROJECTOR_BATCH must be a positive integer, got {self.projector_batch!r}"),
            (isinstance(self.encoder_steps, int) and self.encoder_steps >= 0,
             f"ENCODER_STEPS must be a non-negative integer, got {self.encoder_steps!r}"),
            (isinstance(self.encoder_refine_steps, int) and self.encoder_refine_steps >= 1,
             f"ENCODER_REFINE_STEPS must be a positive integer, got {self.encoder_refine_steps!r}"),
            (self.inversion in ("projector", "encoder", "encoder+projector"),
             f"INVERSION must be 'projector', 'encoder' or 'encoder+projector', got {self.inversion!r}"),
            (self.inversion == "projector" or self.encoder_steps > 0,
             f"INVERSION {self.inversion!r} needs an encoder: ENCODER_STEPS must be > 0"),
            (isinstance(self.alignment_steps, int) and self.alignment_steps >= 1,
             f"ALIGNMENT_STEPS must be a positive integer, got {self.alignment_steps!r}"),
            (self.alignment_lr > 0, f"ALIGNMENT_LR must be positive, got {self.alignment_lr!r}"),
            (self.content_weight >= 0, f"CONTENT_WEIGHT must be >= 0, got {self.content_weight!r}"),
            (self.style_weight >= 0, f"STYLE_WEIGHT must be >= 0, got {self.style_weight!r}"),
            (isinstance(self.patch_grid, int) and self.patch_grid >= 1,
             f"PATCH_GRID must be a positive integer, got {self.patch_grid!r}"),
            (self.classifier_backbone in BACKBONES,
             f"CLASSIFIER_BACKBONE must be one of {BACKBONES}, got {self.classifier_backbone!r}"),
            (self.classifier_size is None or (isinstance(self.classifier_size, int)
                                              and not isinstance(self.classifier_size, bool)
                                              and self.classifier_size >= 16),
             f"CLASSIFIER_SIZE must be None or an integer >= 16, got {self.classifier_size!r}"),
            (isinstance(self.classifier_epochs, int) and self.classifier_epochs >= 1,
             f"CLASSIFIER_EPOCHS must be a positive integer, got {self.classifier_epochs!r}"),
            (isinstance(self.classifier_seeds, int) and self.classifier_seeds >= 1,
             f"CLASSIFIER_SEEDS must be a positive integer, got {self.classifier_seeds!r}"),
            (self.cluster_unit in CLUSTER_UNITS,
             f"CLUSTER_UNIT must be one of {CLUSTER_UNITS}, got {self.cluster_unit!r}"),
            (isinstance(self.attacker_budget, int) and self.attacker_budget >= 1,
             f"ATTACKER_BUDGET must be a positive integer, got {self.attacker_budget!r}"),
            (isinstance(self.dr_min_qwk, (int, float)) and -1 < self.dr_min_qwk < 1,
             f"DR_MIN_QWK must lie in (-1, 1), got {self.dr_min_qwk!r}"),
            (isinstance(self.generator_label_min_qwk, (int, float)) and -1 < self.generator_label_min_qwk < 1,
             f"GENERATOR_LABEL_MIN_QWK must lie in (-1, 1), got {self.generator_label_min_qwk!r}"),
            (0.1 <= self.attacker_test_fraction <= 0.8,
             f"ATTACKER_TEST_FRACTION must lie in [0.1, 0.8], got {self.attacker_test_fraction!r}"),
            (isinstance(self.min_test_images, int) and self.min_test_images >= 1,
             f"MIN_TEST_IMAGES must be a positive integer, got {self.min_test_images!r}"),
            (isinstance(self.min_eval_images, int) and self.min_eval_images >= 2,
             f"MIN_EVAL_IMAGES must be an integer >= 2, got {self.min_eval_images!r}"),
            (isinstance(self.bootstrap, int) and self.bootstrap >= 0,
             f"BOOTSTRAP must be a non-negative integer, got {self.bootstrap!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        # Three cluster roles (attacker train, attacker validation, held out) need three clusters at the largest k
        # (of images; with CLUSTER_UNIT 'patient' the run also checks the private set's patients).
        if self.private_images < 3 * max(self.k_values):
            raise ValueError(f"PRIVATE_IMAGES must be at least 3 x the largest k ({3 * max(self.k_values)}) so that "
                             f"the attacker has train, validation and held-out clusters, got {self.private_images!r}")
