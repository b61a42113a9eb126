"""The disentanglement chapter's parameters: one frozen config, defaults = the ``quick`` profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from anonpaper.experiments.chapter import ChapterConfig, parameter



@dataclass(frozen=True)
class Config(ChapterConfig):
    """Everything that determines the chapter's cohorts, networks and numbers (see the help texts)."""

    seed: int = parameter(0, "Seed of every random draw (cohorts, networks, sampled identities, bootstrap).")
    iris_dataset: str = parameter("phantom-iris", "Iris dataset (multi-class identity setting): 'phantom-iris' or "
                                                  "'warsaw-iris' (the paper's Warsaw-BioBase-Disease-Iris v2.1, needs "
                                                  "IRIS_DATA_ROOT).")
    iris_data_root: str | None = parameter(None, "Folder of a real iris dataset's copy (None: the phantom).")
    cxr_dataset: str = parameter("phantom-cxr", "Chest X-ray dataset (Siamese identity setting): 'phantom-cxr' or "
                                                "'chexpert' (needs CXR_DATA_ROOT).")
    cxr_data_root: str | None = parameter(None, "Folder of a real chest X-ray dataset's copy (None: the phantom).")
    image_size: int = parameter(64, "Square image side in pixels, a multiple of 16 (the authors' code: 64).")
    iris_subjects: int = parameter(30, "Phantom iris subjects, one eye each (the Warsaw set: 115 patients).")
    iris_images_per_eye: int = parameter(10, "Phantom images per iris (the Warsaw set: about 15).")
    cxr_patients: int = parameter(80, "Phantom chest X-ray patients (the paper: 1,791 training patients).")
    cxr_images_per_patient: int = parameter(4, "Phantom images per chest X-ray patient (>= 2: the Siamese loss needs "
                                               "a second image of the same patient).")
    cxr_effusion_prevalence: float = parameter(0.5, "Pleural-effusion prevalence of the phantom (the paper selected a "
                                                    "balanced set).")
    width: int = parameter(8, "Channels of the first encoder / last decoder block (doubled per block, at most 8x).")
    iris_dims: tuple = parameter((64, 64, 64), "Sizes of the medical, identity and other vectors, iris (the authors' "
                                               "multi-class variant: 256 each).")
    cxr_dims: tuple = parameter((64, 64, 64), "Sizes of the medical, identity and other vectors, chest (the authors' "
                                              "Siamese variant: 512 each).")
    noise: float = parameter(0.1, "Standard deviation of the Gaussian noise on the vectors before decoding in "
                                  "training (the authors: 0.1).")
    epochs: int = parameter(40, "Disentanglement-network epochs (the paper: 4,635 iris, 1,551 chest).")
    batch_size: int = parameter(8, "Mini-batch size of the disentanglement network (small batches give a short CPU "
                                      "schedule more updates per image).")
    lr: float = parameter(1e-3, "Adam learning rate (the paper: 2e-5 over thousands of epochs; short CPU schedules "
                                "need more).")
    discriminator_lr: float = parameter(1e-4, "Adam learning rate of the discriminator (the paper: the network's; "
                                              "a slower discriminator keeps the adversarial term from swamping the "
                                              "reconstruction in short schedules).")
    both_swaps: bool = parameter(False, "Replace both the medical and the identity vector in every step (Eq. 1's "
                                        "sum); False replaces one at random with its term doubled (same expectation, "
                                        "half the cost).")
    iris_weights: tuple = parameter((1.0, 1.0, 1.0, 0.015625), "Iris loss weights (lambda_med, lambda_id, "
                                                               "lambda_r, lambda_d) (the paper: 1, 1, 0.1, 5; over "
                                                               "tens of CPU epochs those collapsed the vectors and "
                                                               "left blurred reconstructions, so the CPU profiles "
                                                               "weigh realism up and disentanglement down: lambda_d "
                                                               "= 1/64 on Eq. 1 in its squared Euclidean norm is "
                                                               "the weight 1 on the mean over the 64 vector entries "
                                                               "of the earlier CPU runs; lambda_d = 1 in that norm "
                                                               "left the iris decoder's output spread at 0.16 of "
                                                               "the originals' against 0.40).")
    cxr_weights: tuple = parameter((5.0, 5.0, 1.0, 0.015625), "Chest loss weights (lambda_med, lambda_id, lambda_r, "
                                                              "lambda_d) (the paper: 5, 5, 1, 5; the CPU profiles "
                                                              "use lambda_d = 1/64 for the same reason).")
    alpha: float = parameter(48.0, "PSNR normaliser alpha of the realism loss, dB (the paper: 48).")
    vae_latent: tuple = parameter((16, 64), "Identity-VAE latent sizes, iris and chest (the authors: 16 and 64).")
    vae_epochs: int = parameter(150, "Identity-VAE epochs (the paper: 803 iris, 223 chest).")
    averaging: tuple = parameter((6, 12), "Numbers of training identities averaged by the baselines (plus 'all').")
    ablation_epochs: int = parameter(16, "Epochs of every realism-loss ablation network (Table 4, iris); the "
                                         "fine-tuned variant adds half as many with the full loss.")
    size_fraction: float = parameter(0.5, "Share of the chest training set of the smaller network of Table 5 (the "
                                          "paper: 3,000 of 6,000 images).")
    privacy_levels: tuple = parameter((0.0, 0.25, 0.5, 0.75, 1.0), "Identity-replacement strengths of the "
                                                                   "explanation-quality curve (0 = original "
                                                                   "identity, 1 = a new VAE identity).")
    attacker_backbone: str = parameter("small_cnn", "Backbone of the re-identification attacker (ArcFace embedding "
                                                    "trained on original training identities).")
    attacker_epochs: int = parameter(15, "Attacker epochs (the attacker trained on original images, and the "
                                         "adaptive one trained on originals and the network's reconstructions).")
    attacker_min_rank1: float = parameter(0.5, "Floor of an iris attacker's rank-1 identification of validation "
                                               "images among the training identities (chance: 1 / identities): "
                                               "under it, identity claims on iris are undecided.")
    attacker_min_auc: float = parameter(0.75, "Floor of a chest attacker's verification AUC on pairs of validation "
                                              "images (chance 0.5): under it, identity claims on chest X-rays are "
                                              "undecided.")
    judge_seeds: int = parameter(3, "Training seeds of the judges (the re-identification attacker, the adaptive "
                                    "attacker and the disease classifier): every claim is decided with each seed's "
                                    "judges and the effects are averaged, their spread added to the SE.")
    disease_backbone: str = parameter("small_cnn", "Backbone of the independent disease classifier, trained from "
                                                   "scratch on the original training images (the claims' disease "
                                                   "judge instead of the network's own C_med, which Eq. 1 "
                                                   "optimises).")
    disease_epochs: int = parameter(20, "Epochs of the independent disease classifier.")
    disease_min_auc: float = parameter(0.7, "Floor of the disease classifier's AUROC on the original validation "
                                            "images: under it, disease claims are undecided.")
    decoder_min_spread: float = parameter(0.6, "Floor of the decoder's output spread (mean absolute difference "
                                               "between test reconstructions over that between their originals): "
                                               "a 2 px Gaussian blur of the phantoms keeps about 0.77, a decoder "
                                               "that returns one template for every input about 0 (the first quick "
                                               "decoders: 0.41 iris, 0.57 chest). Under it, the claims that rest on "
                                               "the generated images are undecided.")
    decoder_min_retrieval: float = parameter(0.5, "Floor of the share of test reconstructions whose nearest "
                                                  "original is their own input (chance 1 / test images; the first "
                                                  "quick decoders: 0.02 iris, 0.06 chest).")
    disease_margin: float = parameter(0.10, "Retention margin of 'anonymisation keeps disease': the largest loss of "
                                            "disease accuracy (anonymised against original images, fraction) that "
                                            "still counts as kept, fixed before the run (the paper's own losses: "
                                            "-0.3 to 3.3 points).")
    min_test_images: int = parameter(40, "Smallest test set (images) on which a claim is decided.")
    bootstrap: int = parameter(200, "Patient-clustered bootstrap resamples for standard errors.")
    device: str | None = parameter(None, "Device: None picks CUDA when available, else 'cpu' or 'cuda:N'.")

    def __post_init__(self):
        for name in ("iris_dims", "cxr_dims", "iris_weights", "cxr_weights", "vae_latent", "averaging",
                     "privacy_levels"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        checks = [
            (isinstance(self.seed, int) and self.seed >= 0, f"SEED must be a non-negative integer, got {self.seed!r}"),
            (self.iris_dataset in ("phantom-iris", "warsaw-iris"),
             f"IRIS_DATASET must be 'phantom-iris' or 'warsaw-iris', got {self.iris_dataset!r}"),
            (self.cxr_dataset in ("phantom-cxr", "chexpert"),
             f"CXR_DATASET must be 'phantom-cxr' or 'chexpert', got {self.cxr_dataset!r}"),
            (isinstance(self.image_size, int) and self.image_size >= 32 and self.image_size % 16 == 0,
             f"IMAGE_SIZE must be a multiple of 16 and >= 32, got {self.image_size!r}"),
            (isinstance(self.iris_subjects, int) and self.iris_subjects >= 4,
             f"IRIS_SUBJECTS must be an integer >= 4, got {self.iris_subjects!r}"),
            (isinstance(self.iris_images_per_eye, int) and self.iris_images_per_eye >= 3,
             f"IRIS_IMAGES_PER_EYE must be an integer >= 3 (train, val and test images of every iris), got "
             f"{self.iris_images_per_eye!r}"),
            (isinstance(self.cxr_patients, int) and self.cxr_patients >= 10,
             f"CXR_PATIENTS must be an integer >= 10, got {self.cxr_patients!r}"),
            (isinstance(self.cxr_images_per_patient, int) and self.cxr_images_per_patient >= 2,
             f"CXR_IMAGES_PER_PATIENT must be an integer >= 2, got {self.cxr_images_per_patient!r}"),
            (0.0 < self.cxr_effusion_prevalence < 1.0,
             f"CXR_EFFUSION_PREVALENCE must lie in (0, 1), got {self.cxr_effusion_prevalence!r}"),
            (isinstance(self.width, int) and self.width >= 2, f"WIDTH must be an integer >= 2, got {self.width!r}"),
            (len(self.iris_dims) == 3 and all(isinstance(d, int) and d >= 2 for d in self.iris_dims),
             f"IRIS_DIMS must be three integers >= 2, got {self.iris_dims!r}"),
            (len(self.cxr_dims) == 3 and all(isinstance(d, int) and d >= 2 for d in self.cxr_dims),
             f"CXR_DIMS must be three integers >= 2, got {self.cxr_dims!r}"),
            (self.noise >= 0, f"NOISE must be >= 0, got {self.noise!r}"),
            (isinstance(self.epochs, int) and self.epochs >= 1, f"EPOCHS must be an integer >= 1, got {self.epochs!r}"),
            (isinstance(self.batch_size, int) and self.batch_size >= 2,
             f"BATCH_SIZE must be an integer >= 2, got {self.batch_size!r}"),
            (self.lr > 0, f"LR must be positive, got {self.lr!r}"),
            (self.discriminator_lr > 0, f"DISCRIMINATOR_LR must be positive, got {self.discriminator_lr!r}"),
            (len(self.iris_weights) == 4 and all(w >= 0 for w in self.iris_weights),
             f"IRIS_WEIGHTS must be four non-negative numbers, got {self.iris_weights!r}"),
            (len(self.cxr_weights) == 4 and all(w >= 0 for w in self.cxr_weights),
             f"CXR_WEIGHTS must be four non-negative numbers, got {self.cxr_weights!r}"),
            (self.alpha > 0, f"ALPHA must be positive, got {self.alpha!r}"),
            (len(self.vae_latent) == 2 and all(isinstance(d, int) and d >= 1 for d in self.vae_latent),
             f"VAE_LATENT must be two positive integers (iris, chest), got {self.vae_latent!r}"),
            (isinstance(self.vae_epochs, int) and self.vae_epochs >= 1,
             f"VAE_EPOCHS must be an integer >= 1, got {self.vae_epochs!r}"),
            (all(isinstance(k, int) and k >= 1 for k in self.averaging),
             f"AVERAGING must be positive integers, got {self.averaging!r}"),
            (isinstance(self.ablation_epochs, int) and self.ablation_epochs >= 2,
             f"ABLATION_EPOCHS must be an integer >= 2, got {self.ablation_epochs!r}"),
            (0.1 <= self.size_fraction < 1.0, f"SIZE_FRACTION must lie in [0.1, 1), got {self.size_fraction!r}"),
            (len(self.privacy_levels) >= 2 and all(0.0 <= p <= 1.0 for p in self.privacy_levels),
             f"PRIVACY_LEVELS must be at least two strengths in [0, 1], got {self.privacy_levels!r}"),
            (isinstance(self.judge_seeds, int) and self.judge_seeds >= 1,
             f"JUDGE_SEEDS must be an integer >= 1, got {self.judge_seeds!r}"),
            (isinstance(self.attacker_epochs, int) and self.attacker_epochs >= 1,
             f"ATTACKER_EPOCHS must be an integer >= 1, got {self.attacker_epochs!r}"),
            (isinstance(self.disease_epochs, int) and self.disease_epochs >= 1,
             f"DISEASE_EPOCHS must be an integer >= 1, got {self.disease_epochs!r}"),
            *[(isinstance(getattr(self, name), (int, float)) and 0 <= getattr(self, name) <= 1,
               f"{name.upper()} must lie in [0, 1], got {getattr(self, name)!r}")
              for name in ("attacker_min_rank1", "attacker_min_auc", "disease_min_auc", "decoder_min_spread",
                           "decoder_min_retrieval")],
            (isinstance(self.disease_margin, (int, float)) and 0 < self.disease_margin < 1,
             f"DISEASE_MARGIN must lie in (0, 1), got {self.disease_margin!r}"),
            (isinstance(self.bootstrap, int) and self.bootstrap >= 0,
             f"BOOTSTRAP must be a non-negative integer, got {self.bootstrap!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        object.__setattr__(self, "privacy_levels", tuple(sorted(float(p) for p in self.privacy_levels)))
        if 0.0 not in self.privacy_levels or 1.0 not in self.privacy_levels:
            raise ValueError(f"PRIVACY_LEVELS must include 0 (the reconstruction: the control of every privacy "
                             f"claim) and 1 (the paper's anonymisation), got {self.privacy_levels!r}")
        from anonpaper.models.classifiers import CLASSIFIER_NAMES

        for name in ("attacker_backbone", "disease_backbone"):
            if getattr(self, name) not in CLASSIFIER_NAMES:
                raise ValueError(f"{name.upper()} must be one of {CLASSIFIER_NAMES}, got {getattr(self, name)!r}")

    def network_description(self, dataset: str) -> dict[str, Any]:
        """The fields that determine a disentanglement network of ``dataset`` ("iris" or "cxr"), for cache keys."""
        names = ("image_size", "width", "noise", "batch_size", "lr", "discriminator_lr", "both_swaps", "alpha", "seed")
        description = {name: getattr(self, name) for name in names}
        description["dims"] = list(self.iris_dims if dataset == "iris" else self.cxr_dims)
        description["weights"] = list(self.iris_weights if dataset == "iris" else self.cxr_weights)
        return description
