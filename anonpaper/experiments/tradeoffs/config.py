"""The trade-offs chapter's parameters: one frozen config, defaults = the ``quick`` profile."""

from __future__ import annotations

import math
from dataclasses import dataclass

from anonpaper.experiments.chapter import ChapterConfig, parameter

BACKBONES = ("small_cnn", "resnet10t", "resnet18d")
# The learned methods this chapter can audit (anonpaper.experiments.releases builds each from its chapter).
GAN_METHODS = ("k-salsa", "sspace-vessel-edit", "stylespace", "gmia", "identity-swap")
ATTRIBUTE_ATTACKERS = ("adaptive", "transfer")
UTILITY_SCORES = ("trained_on_release", "transfer")


def _sweep(values: tuple, name: str, minimum: float, whole: bool = False, strict: bool = False) -> str | None:
    """An error message when ``values`` is not a non-empty increasing tuple of numbers above ``minimum``."""
    if not isinstance(values, (tuple, list)) or not values:
        return f"{name} must be a non-empty list of numbers, got {values!r}"
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{name} must hold numbers, got {value!r}"
        if (value <= minimum) if strict else (value < minimum):
            return f"{name} values must be {'>' if strict else '>='} {minimum:g}, got {value!r}"
        if whole and value != int(value):
            return f"{name} values must be whole numbers, got {value!r}"
    if list(values) != sorted(set(values)):
        return f"{name} must be distinct and increasing, got {values!r}"
    return None


@dataclass(frozen=True)
class Config(ChapterConfig):
    """Everything that determines the chapter's cohorts, releases, audits and claims (see the help texts)."""

    seed: int = parameter(0, "Seed of every random draw (cohorts, member patients, methods, attackers, bootstrap).")
    image_size: int = parameter(64, "Square image side in pixels of both phantom cohorts. The learned fundus "
                                    "methods invert the members at their generator's side (quick: 128 px) and "
                                    "release them at this one; the attackers, which re-identify every unchanged "
                                    "image at 64 px, would cost four times as much at 128 px.")
    fundus_patients: int = parameter(100, "Fundus phantom patients (2 or 3 images each; quick: 100, since every "
                                         "member image is inverted twice into the 128 px fundus generator, once "
                                         "for k-SALSA and once for the vessel edits).")
    cxr_patients: int = parameter(160, "Chest X-ray phantom patients (with fewer, the findings model trained on "
                                       "the members' originals lands near its floor at quick).")
    cxr_images_per_patient: int = parameter(4, "Chest X-ray images per patient (linkage needs at least 2).")
    phantom_sex_effect: float = parameter(8.0, "Strength of the retina phantom's sex signal (1 = its default, "
                                               "which an attacker needs hundreds of patients to learn; larger = "
                                               "easier): the attribute threat must be real for its audit to mean "
                                               "something. The chest X-ray phantom's sex signal (breast shadows) is "
                                               "fixed.")
    member_share: float = parameter(0.7, "Share of each cohort's patients whose images are released (the members); "
                                         "the others are never released by any method and are the membership "
                                         "attacker's non-members (a fixed split, the same for every method).")
    blur_sigmas: tuple = parameter((0.5, 1.0, 2.0, 4.0, 8.0, 16.0), "Gaussian blur standard deviations (pixels): "
                                                                     "the reference curve of the claims, which "
                                                                     "compare a method with blur only at privacy "
                                                                     "inside blur's range, so the sweep runs from "
                                                                     "barely visible to nearly the image's mean "
                                                                     "colour.")
    pixelate_blocks: tuple = parameter((2, 4, 8), "Pixelation block sides (pixels).")
    noise_sigmas: tuple = parameter((0.05, 0.15, 0.4), "Gaussian noise standard deviations ([0, 1] intensity "
                                                        "units).")
    snow_p: tuple = parameter((0.1, 0.3, 0.5), "Snow and VS-Snow fractions p (paper 2: 0.1-0.5); VS-Snow uses the "
                                               "phantom's own vessel masks (fundus only).")
    k_values: tuple = parameter((2, 5, 10), "k of k-same pixel averaging (clusters of at least k patients).")
    gan_methods: tuple = parameter(GAN_METHODS, "Learned methods audited, each with the networks and recipe of the "
                                                "chapter that reproduces it: 'k-salsa' (paper 4), "
                                                "'sspace-vessel-edit' (paper 1) and 'stylespace' (its baseline) on "
                                                "the generators chapter's fundus StyleGAN2, 'gmia' (paper 3) and "
                                                "'identity-swap' (paper 5) on chest X-rays; an empty list audits "
                                                "none.")
    generators_profile: str = parameter("quick", "Profile of the chapters whose trained networks the learned "
                                                 "methods use (02 generators, 03 vascular, 04 GMIA, 05 k-SALSA, 06 "
                                                 "disentanglement).")
    ksalsa_k_values: tuple = parameter((2, 5), "k of k-SALSA (clusters of at least k patients).")
    projector_steps: int = parameter(50, "Projector Adam steps per image into W+ for the learned fundus methods "
                                          "(k-SALSA, the vessel edit and StyleSpace; their chapters: 100 at quick). "
                                          "Two CPU threads take about 48 ms per image-step in the 128 px "
                                          "`sg2-cpu128`: 50 steps for the fundus members take about 7 minutes "
                                          "per inversion.")
    alignment_steps: int = parameter(40, "k-SALSA local style alignment Adam steps per cluster (the paper: 100).")
    vessel_alphas: tuple = parameter((0.5, 1.0), "Strengths alpha of paper 1's vessel edit (Eq. 11); StyleSpace is "
                                                 "stepped to the same image change (paper 1's Table 2: alpha 0.5).")
    gmia_margins: tuple = parameter((0.0, -0.7), "Identity margins m of GMIA's latent optimisation, loosest first "
                                                 "(the GMIA chapter's ablation: 0, -0.5, -0.7).")
    swap_strengths: tuple = parameter((0.5, 1.0), "Identity-replacement strengths of the disentanglement identity "
                                                  "swap (1: the paper's anonymisation).")
    attacker_share: float = parameter(0.5, "Share of the patients whose images train the audit's attackers and task "
                                           "models; the other patients are attacked (the same split for every "
                                           "method).")
    identity_epochs: int = parameter(30, "Epochs of the audit's identity embedding (linkage and membership).")
    classifier_epochs: int = parameter(15, "Epochs of the audit's attribute attackers and task models.")
    backbone: str = parameter("small_cnn", "Backbone of every audit network (from random weights).")
    attacker_seeds: int = parameter(1, "Networks trained per audit attacker (seeds); their spread enters the SEs.")
    attribute_attacker: str = parameter("adaptive", "The attribute attacker the figures and claims read: "
                                                    "'adaptive' (trained on released images of other patients: an "
                                                    "attacker who has the release) or 'transfer' (trained on "
                                                    "originals).")
    utility_score: str = parameter("trained_on_release", "The utility the figures and claims read: "
                                                         "'trained_on_release' (a task model trained on the release, "
                                                         "tested on real images of other patients: what a data user "
                                                         "gets) or 'transfer' (a model trained on originals, applied "
                                                         "to the release).")
    attacker_min_advantage: float = parameter(0.05, "Floor of every attack on the unchanged originals: its score "
                                                    "must beat chance by this much (AUC / balanced-accuracy "
                                                    "points), or the claims resting on it are undecided "
                                                    "(advantage retained divides by that margin).")
    utility_min_advantage: float = parameter(0.05, "Floor of the task model on the originals: QWK (fundus DR "
                                                   "class) or macro AUROC - 0.5 (chest X-ray findings) at least this, "
                                                   "or the utility claims are undecided (at quick the findings model "
                                                   "trained on the members' originals reaches AUROC 0.60-0.62).")
    chance_margin: float = parameter(0.25, "Equivalence margin of 'at chance' claims, in advantage retained (0.25: "
                                           "within a quarter of the originals' advantage, at 2 SE).")
    min_attacked_patients: int = parameter(20, "Fewest attacked patients on which a claim is decided.")
    bootstrap: int = parameter(200, "Patient-bootstrap resamples of every audit standard error.")
    device: str | None = parameter(None, "Device: None picks CUDA when available, else 'cpu' or 'cuda:N'.")

    def __post_init__(self):
        def whole(name: str, minimum: int) -> tuple[bool, str]:
            value = getattr(self, name)
            return (isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
                    f"{name.upper()} must be an integer >= {minimum}, got {value!r}")

        checks = [whole("seed", 0), whole("image_size", 32), whole("fundus_patients", 12),
                  whole("cxr_patients", 12), whole("cxr_images_per_patient", 2), whole("projector_steps", 1),
                  whole("alignment_steps", 1), whole("identity_epochs", 1), whole("classifier_epochs", 1),
                  whole("attacker_seeds", 1), whole("min_attacked_patients", 1), whole("bootstrap", 2)]
        checks += [
            (isinstance(self.phantom_sex_effect, (int, float)) and self.phantom_sex_effect > 0,
             f"PHANTOM_SEX_EFFECT must be a positive number, got {self.phantom_sex_effect!r}"),
            (isinstance(self.member_share, float) and 0.0 < self.member_share < 1.0,
             f"MEMBER_SHARE must be a number in (0, 1), got {self.member_share!r}"),
            (isinstance(self.attacker_share, float) and 0.0 < self.attacker_share < 1.0,
             f"ATTACKER_SHARE must be a number in (0, 1), got {self.attacker_share!r}"),
            (isinstance(self.gan_methods, (tuple, list)) and set(self.gan_methods) <= set(GAN_METHODS)
             and len(set(self.gan_methods)) == len(self.gan_methods),
             f"GAN_METHODS must be a list of distinct names from {list(GAN_METHODS)}, got {self.gan_methods!r}"),
            (self.generators_profile in ("smoke", "quick", "paper"),
             f"GENERATORS_PROFILE must be 'smoke', 'quick' or 'paper', got {self.generators_profile!r}"),
            (self.backbone in BACKBONES, f"BACKBONE must be one of {BACKBONES}, got {self.backbone!r}"),
            (self.attribute_attacker in ATTRIBUTE_ATTACKERS,
             f"ATTRIBUTE_ATTACKER must be one of {ATTRIBUTE_ATTACKERS}, got {self.attribute_attacker!r}"),
            (self.utility_score in UTILITY_SCORES,
             f"UTILITY_SCORE must be one of {UTILITY_SCORES}, got {self.utility_score!r}"),
            (isinstance(self.attacker_min_advantage, (int, float)) and 0.0 < self.attacker_min_advantage < 0.5,
             f"ATTACKER_MIN_ADVANTAGE must lie in (0, 0.5), got {self.attacker_min_advantage!r}"),
            (isinstance(self.utility_min_advantage, (int, float)) and 0.0 < self.utility_min_advantage < 0.5,
             f"UTILITY_MIN_ADVANTAGE must lie in (0, 0.5), got {self.utility_min_advantage!r}"),
            (isinstance(self.chance_margin, (int, float)) and 0.0 < self.chance_margin < 1.0,
             f"CHANCE_MARGIN must lie in (0, 1), got {self.chance_margin!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        for name, minimum, integer, strict in (("blur_sigmas", 0, False, True), ("pixelate_blocks", 2, True, False),
                                               ("noise_sigmas", 0, False, True), ("snow_p", 0, False, True),
                                               ("k_values", 2, True, False), ("ksalsa_k_values", 2, True, False),
                                               ("vessel_alphas", 0, False, True), ("swap_strengths", 0, False, True)):
            message = _sweep(getattr(self, name), name.upper(), minimum, integer, strict)
            if message:
                raise ValueError(message)
        for name in ("vessel_alphas", "swap_strengths"):
            if max(getattr(self, name)) > 1:
                raise ValueError(f"{name.upper()} values must lie in (0, 1], got {getattr(self, name)!r}")
        # GMIA's margins run from loosest to strictest (more private): distinct, decreasing cosines in [-1, 1].
        message = _sweep(tuple(-value for value in self.gmia_margins) if isinstance(self.gmia_margins, (tuple, list))
                         else self.gmia_margins, "GMIA_MARGINS (negated)", -1)
        if message or max(self.gmia_margins) > 1 or min(self.gmia_margins) < -1:
            raise ValueError(f"GMIA_MARGINS must be distinct decreasing cosines in [-1, 1] (loosest first), got "
                             f"{self.gmia_margins!r}")
        if max(self.snow_p) > 1:
            raise ValueError(f"SNOW_P values must lie in (0, 1], got {self.snow_p!r}")
        if max(self.noise_sigmas) > 1:
            raise ValueError(f"NOISE_SIGMAS values must lie in (0, 1], got {self.noise_sigmas!r}")

    def audit_description(self) -> dict:
        """The fields that determine every audit (for cache keys)."""
        names = ("seed", "attacker_share", "identity_epochs", "classifier_epochs", "backbone", "attacker_seeds",
                 "bootstrap")
        return {name: getattr(self, name) for name in names}
