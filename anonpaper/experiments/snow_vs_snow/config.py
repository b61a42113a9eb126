"""The Snow / VS-Snow chapter's parameters: one frozen config, defaults = the ``quick`` profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from anonpaper.experiments.chapter import ChapterConfig, parameter


@dataclass(frozen=True)
class Config(ChapterConfig):
    """Everything that determines the chapter's cohort, networks and numbers (see the help texts)."""

    seed: int = parameter(0, "Seed of every random draw (cohort, networks, obfuscation, bootstrap).")
    dataset: str = parameter("phantom-retina", "Registered dataset name (anonpaper.data.registry); a real dataset "
                                               "also needs DATA_ROOT, the folder of your copy.")
    data_root: str | None = parameter(None, "Folder of a real dataset's copy (None: the phantom).")
    image_size: int = parameter(128, "Square image side in pixels (the paper: 256).")
    n_patients: int = parameter(450, "Phantom patients (ignored for real datasets). Sized for power within the "
                                     "quick budget: at 300 patients (23.6 min on 2 cores) the drop claims resolved "
                                     "about 19 accuracy points at 2 SE against the paper's 10-20 point drops; 450 "
                                     "should bring that to about 16 (SE shrinks as 1/sqrt(patients)).")
    phantom_sex_effect: float = parameter(1.0, "Strength of the phantom's sex effect on its latent traits (1 = the "
                                               "phantom's default; larger = easier attacker; ignored for real data).")
    p_values: tuple = parameter((0.1, 0.3, 0.5), "Obfuscation fractions p (probability a value / vessel pixel is "
                                                 "replaced; larger = more private).")
    backbone: str = parameter("resnet10t", "Classifier backbone (the paper: resnet200d, ImageNet-pretrained; here "
                                           "always from random weights).")
    epochs: int = parameter(10, "Maximum classifier epochs (the paper: 50, early stopping on validation F1).")
    batch_size: int = parameter(32, "Classifier mini-batch size.")
    training_seeds: int = parameter(3, "Training seeds of the networks the claims compare: the attacker (so every "
                                       "sex score) and the DR classifiers on the original images and at the largest "
                                       "p of each method; a score is the mean over seeds and its SE adds the seed "
                                       "spread; the other DR classifiers train once and borrow the seeded ones' "
                                       "spread (the paper: one run).")
    early_stopping_patience: int | None = parameter(5, "Epochs without a better validation F1 before stopping "
                                                       "(None: all epochs).")
    lr: float = parameter(1e-3, "Adam learning rate (the paper: 1e-4 for ImageNet-pretrained networks; networks "
                                "from scratch need more).")
    weight_decay: float = parameter(1e-5, "Adam weight decay (the paper: 1e-5).")
    focal_gamma: float = parameter(0.6, "Focal-loss gamma of the DR classifier (the paper: 0.6).")
    augment: bool = parameter(True, "The paper's augmentation (horizontal flip and shift-scale-rotate, each with "
                                    "probability 0.25).")
    lr_schedule: str = parameter("cosine", "Learning-rate schedule: 'constant' (the paper) or 'cosine' (annealing; "
                                           "steadier short runs from scratch).")
    channels_last: bool = parameter(True, "Train the classifiers in channels-last layout on a CPU too (False: on "
                                          "CUDA only): oneDNN's channels-last convolutions train the ResNet faster, "
                                          "most on AVX-512 (benchmarks/bench_train_loop.py --channels-last), but "
                                          "round differently, so the networks differ slightly from the default "
                                          "layout's.")
    segmenter: str = parameter("unet", "Vessel segmenter: 'frunet' (FR-UNet-style, the paper) or 'unet'.")
    segmenter_width: int = parameter(8, "Channels of the segmenter's full-resolution level (FR-UNet: 32; widths "
                                        "double per level).")
    segmenter_epochs: int = parameter(6, "Segmenter epochs (FR-UNet: 40).")
    segmenter_patch: int = parameter(48, "Square segmenter training patch side in pixels (FR-UNet: 48; a multiple "
                                         "of 8).")
    segmenter_patches_per_epoch: int | None = parameter(512, "Random segmenter patches per epoch (None: as many as "
                                                             "tile the images once).")
    segmenter_lr: float = parameter(3e-3, "Segmenter Adam learning rate (FR-UNet: 1e-4; short CPU schedules need "
                                          "more).")
    segmenter_loss: str = parameter("bce+dice", "Segmenter loss: 'bce' (FR-UNet) or 'bce+dice' (converges faster "
                                                "on thin vessels).")
    segmenter_min_dice: float = parameter(0.5, "The segmenter's own check: below this test Dice its vessel masks "
                                               "are not trusted and the claims that rest on them are undecided.")
    vessel_source: str = parameter("segmenter", "Vessels VS-Snow obfuscates: 'segmenter' (predicted, the paper) or "
                                                "'ground_truth' (the cohort's masks, an upper bound).")
    snow_mask_mode: str = parameter("per_channel", "Snow's selection: 'per_channel' (the paper: each RGB channel "
                                                   "draws its own pixels) or 'per_location'.")
    vs_window: int = parameter(5, "VS-Snow neighbourhood window side in pixels (odd).")
    attacker_min_advantage: float = parameter(0.05, "The sex attacker's own check: its accuracy on original test "
                                                    "images must beat the majority rate by this much (0.05 = 5 "
                                                    "points), or the claims that it falls are undecided.")
    dr_min_f1: float = parameter(0.4, "The DR classifier's own check: its macro-F1 on original test images must reach "
                                      "this (three grades: chance is about 0.33), or the DR claims are undecided.")
    min_test_images: int = parameter(40, "Smallest test set (images) on which a claim is decided.")
    bootstrap: int = parameter(200, "Patient-clustered bootstrap resamples for standard errors.")
    device: str | None = parameter(None, "Device: None picks CUDA when available, else 'cpu' or 'cuda:N'.")

    def __post_init__(self):
        p_values = tuple(float(p) for p in self.p_values)
        if not p_values or any(not 0.0 < p <= 1.0 for p in p_values) or len(set(p_values)) != len(p_values):
            raise ValueError(f"P_VALUES must be distinct numbers in (0, 1], got {self.p_values!r}")
        object.__setattr__(self, "p_values", tuple(sorted(p_values)))
        checks = [
            (isinstance(self.seed, int) and self.seed >= 0, f"SEED must be a non-negative integer, got {self.seed!r}"),
            (isinstance(self.image_size, int) and self.image_size >= 32,
             f"IMAGE_SIZE must be an integer >= 32, got {self.image_size!r}"),
            (isinstance(self.n_patients, int) and self.n_patients >= 6,
             f"N_PATIENTS must be an integer >= 6 (train, val and test need patients), got {self.n_patients!r}"),
            (isinstance(self.epochs, int) and self.epochs >= 1, f"EPOCHS must be an integer >= 1, got {self.epochs!r}"),
            (isinstance(self.training_seeds, int) and self.training_seeds >= 1,
             f"TRAINING_SEEDS must be an integer >= 1, got {self.training_seeds!r}"),
            (isinstance(self.batch_size, int) and self.batch_size >= 2,
             f"BATCH_SIZE must be an integer >= 2, got {self.batch_size!r}"),
            (self.lr_schedule in ("constant", "cosine"),
             f"LR_SCHEDULE must be 'constant' or 'cosine', got {self.lr_schedule!r}"),
            (isinstance(self.channels_last, bool), f"CHANNELS_LAST must be True or False, got {self.channels_last!r}"),
            (self.segmenter in ("frunet", "unet"), f"SEGMENTER must be 'frunet' or 'unet', got {self.segmenter!r}"),
            (isinstance(self.segmenter_patch, int) and self.segmenter_patch % 8 == 0 and self.segmenter_patch > 0,
             f"SEGMENTER_PATCH must be a positive multiple of 8, got {self.segmenter_patch!r}"),
            (self.segmenter_loss in ("bce", "bce+dice"),
             f"SEGMENTER_LOSS must be 'bce' or 'bce+dice', got {self.segmenter_loss!r}"),
            (0.0 <= self.attacker_min_advantage < 1.0,
             f"ATTACKER_MIN_ADVANTAGE must lie in [0, 1), got {self.attacker_min_advantage!r}"),
            (0.0 <= self.dr_min_f1 <= 1.0, f"DR_MIN_F1 must lie in [0, 1], got {self.dr_min_f1!r}"),
            (0.0 <= self.segmenter_min_dice <= 1.0,
             f"SEGMENTER_MIN_DICE must lie in [0, 1], got {self.segmenter_min_dice!r}"),
            (self.vessel_source in ("segmenter", "ground_truth"),
             f"VESSEL_SOURCE must be 'segmenter' or 'ground_truth', got {self.vessel_source!r}"),
            (self.snow_mask_mode in ("per_channel", "per_location"),
             f"SNOW_MASK_MODE must be 'per_channel' or 'per_location', got {self.snow_mask_mode!r}"),
            (isinstance(self.vs_window, int) and self.vs_window >= 3 and self.vs_window % 2 == 1,
             f"VS_WINDOW must be an odd integer >= 3, got {self.vs_window!r}"),
            (isinstance(self.bootstrap, int) and self.bootstrap >= 0,
             f"BOOTSTRAP must be a non-negative integer, got {self.bootstrap!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def is_phantom(self) -> bool:
        """Whether the chapter runs on a generated phantom cohort (no DATA_ROOT)."""
        return self.dataset.startswith("phantom-") and self.data_root is None

    def classifier_description(self) -> dict[str, Any]:
        """The fields that determine a classifier (for cache keys)."""
        names = ("backbone", "epochs", "batch_size", "lr", "weight_decay", "focal_gamma", "early_stopping_patience",
                 "augment", "seed")
        description = {name: getattr(self, name) for name in names}
        if self.lr_schedule != "constant":  # only a new option enters the key: cached constant-rate runs stay valid
            description["lr_schedule"] = self.lr_schedule
        if self.channels_last:  # likewise: networks trained in the default layout keep their keys
            description["channels_last"] = True
        return description

    def segmenter_description(self) -> dict[str, Any]:
        """The fields that determine the vessel segmenter (for cache keys)."""
        names = ("segmenter", "segmenter_width", "segmenter_epochs", "segmenter_patch", "segmenter_patches_per_epoch",
                 "segmenter_lr", "segmenter_loss", "seed")
        return {name: getattr(self, name) for name in names}
