"""The trade-offs pipeline: every method on one privacy-utility footing, audited by :mod:`anonpaper.audit`.

1. **Cohorts.** One fundus phantom cohort (2-3 images per patient, a strengthened sex signal, DR grades grouped
   healthy / NPDR / PDR as the utility task, vessel masks for VS-Snow) and one chest X-ray phantom cohort (a fixed
   number of images per patient; five findings as one multi-label task). A seeded share of each cohort's patients
   are the *members*: only their images are released, by every method, and the others are the membership
   attacker's non-members (:func:`load_modality`).
2. **Releases.** Every method of the one registry (:func:`anonpaper.methods.get`) swept over its knob, each knob
   ordered from least to most private: Gaussian blur (sigma), pixelation (block side), Gaussian noise (sigma), Snow
   and VS-Snow (p; VS-Snow on the fundus phantom's own vessel masks), k-same pixel averaging (k patients per
   cluster), plus the two ends, *no change* (the members' originals) and *constant* (one constant image, the
   zero-information release); and, where the generators chapter's fundus StyleGAN2 is at hand, k-SALSA
   (:func:`ksalsa_releases`). Every release is paired with its source images: a method that releases one image
   per cluster (k-same, k-SALSA) stands that image in for each member's image, so every method is audited alike.
3. **Audits.** One :func:`anonpaper.audit.audit_release` per (method, knob) on the same originals, members and
   audit seed, so every audit splits the patients into the same attacker-train and attacked sides. A finished
   audit is cached (:class:`anonpaper.cache.ArtifactCache`, keyed by the original and released pixels, the labels,
   the audit settings and the audit's code), so a rerun loads it; within one audit the audit memoises its networks (the originals'
   attackers serve both the release and the originals' reference), but it offers no cache across audits, so each
   audit trains its networks on the originals again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from anonpaper import methods
from anonpaper.audit import AuditReport, AuditSettings, audit_release
from anonpaper.cache import ArtifactCache
from anonpaper.data import load_cohort
from anonpaper.experiments.k_salsa.release import GENERATOR_KIND
from anonpaper.experiments.tradeoffs.config import Config
from anonpaper.runtime import content_hash, derive_seed

MODALITIES = {"fundus": "fundus", "cxr": "chest X-ray"}
NO_CHANGE, CONSTANT = "no change", "constant"
METHOD_LABELS = {NO_CHANGE: "no change", CONSTANT: "constant image", "blur": "blur", "pixelate": "pixelation",
                 "gaussian-noise": "Gaussian noise", "snow": "Snow", "vs-snow": "VS-Snow",
                 "k-same-pixel": "k-same pixel", "k-salsa": "k-SALSA"}
KNOBS = {"blur": ("sigma", "blur_sigmas"), "pixelate": ("block_size", "pixelate_blocks"),
         "gaussian-noise": ("sigma", "noise_sigmas"), "snow": ("p", "snow_p"), "vs-snow": ("p", "snow_p"),
         "k-same-pixel": ("k", "k_values"), "k-salsa": ("k", "ksalsa_k_values")}
KNOB_SYMBOLS = {"sigma": "σ", "block_size": "block", "p": "p", "k": "k"}
FUNDUS_ONLY = ("vs-snow", "k-salsa")
# The methods the papers of the study propose (the others are the trivial baselines).
PAPER_METHODS = ("snow", "vs-snow", "k-salsa")
# GAN-based methods of the study that this chapter does not audit yet, and what they would need (shown on the page).
NOT_AUDITED = {
    "S-space vessel edit (paper 1), StyleSpace": "its edit rests on the vascular chapter's channel ranking (Jacobian "
                                                 "contribution scores through that chapter's vessel segmenter, on "
                                                 "generated images), computed inside that chapter's run; releasing "
                                                 "real images would add a projection into the generator per image",
    "GMIA latent optimisation (paper 3)": "needs the identity and utility networks and the latent encoder that the "
                                          "GMIA chapter's run trains for its own chest X-ray cohort",
    "disentanglement identity swap (paper 5)": "needs the autoencoder that the disentanglement chapter's run trains "
                                               "on its own iris and chest X-ray cohorts",
}
FUNDUS_TASK, CXR_TASK = "dr_3class", "findings"


@dataclass(frozen=True)
class Setting:
    """One release: a method at one knob value (``knob`` empty for the two ends)."""

    method: str
    knob: str = ""
    value: float | None = None

    @property
    def label(self) -> str:
        """E.g. ``"blur σ=1"``, ``"k-same pixel k=5"``, ``"no change"``."""
        name = METHOD_LABELS[self.method]
        if not self.knob:
            return name
        return f"{name} {KNOB_SYMBOLS[self.knob]}={self.value:g}"


def settings_for(config: Config, modality: str) -> list[Setting]:
    """Every release of a modality, the two ends first, each method's knob in increasing (more private) order."""
    settings = [Setting(NO_CHANGE), Setting(CONSTANT)]
    for method, (knob, field_name) in KNOBS.items():
        if method in FUNDUS_ONLY and modality != "fundus":
            continue
        if method == "k-salsa" and method not in config.gan_methods:
            continue
        settings += [Setting(method, knob, float(value)) for value in getattr(config, field_name)]
    return settings


# ---------------------------------------------------------------------------------------------------------------
# cohorts
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ModalityData:
    """One cohort as the audit takes it.

    Attributes:
        name: ``"fundus"`` or ``"cxr"``.
        images: uint8 ``(N, H, W, C)`` (C = 3 fundus, 1 chest X-ray).
        patients: ``(N,)`` patient ids.
        sex: ``(N,)`` 0 = F, 1 = M.
        tasks: The utility task: ``{"dr_3class": (N,) grades}`` or ``{"findings": (N, K) 0/1}``.
        finding_names: The findings' names (chest X-ray).
        vessels: bool ``(N, H, W)`` vessel masks (fundus) or None.
        members: Sorted ids of the patients whose images are released.
        member_rows: Indices of the members' images (the release's sources), in image order.
    """

    name: str
    images: np.ndarray
    patients: np.ndarray
    sex: np.ndarray
    tasks: dict[str, np.ndarray]
    finding_names: list[str]
    vessels: np.ndarray | None
    members: np.ndarray
    member_rows: np.ndarray

    def summary(self) -> dict[str, Any]:
        """Counts for the cohort table."""
        member_images = len(self.member_rows)
        return {"modality": MODALITIES[self.name], "patients": int(len(np.unique(self.patients))),
                "images": int(len(self.patients)), "image_size": int(self.images.shape[1]),
                "channels": int(self.images.shape[3]), "member_patients": int(len(self.members)),
                "member_images": member_images, "non_member_patients":
                    int(len(np.unique(self.patients)) - len(self.members)),
                "female_share": float(np.mean(self.sex == 0)),
                "task": "DR class (healthy / NPDR / PDR), QWK" if self.name == "fundus" else
                        f"{len(self.finding_names)} findings, macro AUROC"}


def load_modality(config: Config, name: str) -> ModalityData:
    """The fundus (``"fundus"``) or chest X-ray (``"cxr"``) phantom cohort and its fixed member patients."""
    if name == "fundus":
        cohort = load_cohort("phantom-retina", n_patients=config.fundus_patients, image_size=config.image_size,
                             seed=config.seed, images_per_patient=(2, 3), sex_effect=config.phantom_sex_effect)
    elif name == "cxr":
        cohort = load_cohort("phantom-cxr", n_patients=config.cxr_patients, image_size=config.image_size,
                             seed=config.seed, images_per_patient=config.cxr_images_per_patient)
    else:
        raise ValueError(f"unknown modality {name!r}; expected one of {sorted(MODALITIES)}")
    images = cohort.load_images()
    if images.ndim == 3:
        images = images[..., None]
    table = cohort.table
    patients = table["patient_id"].astype(str).to_numpy()
    sex = (table["sex"] == "M").to_numpy().astype(np.int64)
    finding_names: list[str] = []
    vessels = None
    if name == "fundus":
        tasks = {FUNDUS_TASK: table["dr_3class"].to_numpy().astype(np.int64)}
        vessels = np.asarray(cohort.load_masks("vessel")).astype(bool)
    else:
        columns = [column for column in table.columns if column.startswith("label_") and column != "label_no_finding"]
        finding_names = [column.removeprefix("label_") for column in columns]
        # Uncertain (-1) or blank findings count as negative, as the audit's folder reader does.
        tasks = {CXR_TASK: (table[columns].apply(pd.to_numeric, errors="coerce").to_numpy() == 1).astype(np.float32)}
    unique = np.unique(patients)
    rng = np.random.default_rng(derive_seed(config.seed, "members", name))
    members = np.sort(rng.choice(unique, size=int(round(config.member_share * len(unique))), replace=False))
    return ModalityData(name=name, images=np.ascontiguousarray(images), patients=patients, sex=sex, tasks=tasks,
                        finding_names=finding_names, vessels=vessels, members=members,
                        member_rows=np.flatnonzero(np.isin(patients, members)))


# ---------------------------------------------------------------------------------------------------------------
# releases
# ---------------------------------------------------------------------------------------------------------------
def release(data: ModalityData, setting: Setting, config: Config,
            gan_releases: dict[Setting, np.ndarray] | None = None) -> np.ndarray:
    """The members' images released by ``setting``: uint8 ``(M, H, W, C)``, row i from ``data.member_rows[i]``."""
    sources = data.images[data.member_rows]
    if setting.method == NO_CHANGE:
        return sources.copy()
    if setting.method == CONSTANT:
        anonymizer = methods.get("constant")
    elif setting.method == "k-salsa":
        if gan_releases is None or setting not in gan_releases:
            raise ValueError(f"{setting.label}: the k-SALSA releases were not built (ksalsa_releases)")
        return gan_releases[setting]
    else:
        value = int(setting.value) if setting.knob in ("block_size", "k") else setting.value
        anonymizer = methods.get(setting.method, **{setting.knob: value})
    if anonymizer.needs_fit:
        # Dataset-level options (Snow's channel means, the constant's value) come from the released set itself.
        anonymizer = anonymizer.fit(sources)
    seed = derive_seed(config.seed, "release", data.name, setting.method, setting.value)
    masks = data.vessels[data.member_rows] if anonymizer.method.needs_masks else None
    patients = data.patients[data.member_rows] if anonymizer.method.needs_patients else None
    return anonymizer(sources, seed=seed, masks=masks, patients=patients)


def ksalsa_releases(data: ModalityData, config: Config, generator_config: Any,
                    log: Callable[[str], None] = lambda line: None) -> tuple[dict[Setting, np.ndarray], dict]:
    """k-SALSA releases of the fundus members at every k of ``config.ksalsa_k_values``.

    The generators chapter's fundus StyleGAN2 (:func:`anonpaper.experiments.generators.load_generator` at
    ``generator_config``), the k-SALSA chapter's inversion (the projector into W+, no noise maps) and feature
    network (the generators chapter's vessel U-Net) and its alignment recipe (the k-SALSA chapter's defaults for
    learning rate and loss weights), clusters of at least k patients
    (:func:`anonpaper.methods.ksalsa.k_salsa_synthesize`). Images are resized to the generator's resolution for
    inversion and the synthetic images back to the cohort's; each member image is released as its cluster's
    synthetic image. Cached by member pixels, generator and recipe.

    Returns:
        ``({Setting: uint8 (M, H, W, 3)}, details)``; details hold the generator's source and kimg, the
        inversion's mean PSNR and the seconds.
    """
    from anonpaper.experiments.generators import generator_description
    from anonpaper.experiments.k_salsa import Config as KSalsaConfig
    from anonpaper.experiments.k_salsa.release import k_salsa_release

    recipe = KSalsaConfig()
    sources = data.images[data.member_rows]
    patients = data.patients[data.member_rows]
    description = {"members": content_hash(sources), "patients": patients.tolist(),
                   "generator": generator_description(GENERATOR_KIND, generator_config),
                   "projector_steps": config.projector_steps, "alignment_steps": config.alignment_steps,
                   "k": list(config.ksalsa_k_values), "seed": config.seed,
                   "recipe": [recipe.alignment_lr, recipe.content_weight, recipe.style_weight, recipe.patch_grid]}

    def build() -> dict:
        released, details = k_salsa_release(sources, patients, config.ksalsa_k_values, generator_config,
                                            projector_steps=config.projector_steps,
                                            alignment_steps=config.alignment_steps, seed=config.seed, log=log)
        return {"released": released, **details}

    # Built by the k-SALSA chapter's inversion and the package's k-SALSA: keyed on that code, not on this chapter's.
    artifact = ArtifactCache("tradeoffs-ksalsa", owner="anonpaper.experiments.k_salsa.pipeline").get_or_create(
        description, build)
    details = {key: value for key, value in artifact.items() if key != "released"}
    return {Setting("k-salsa", "k", k): images for k, images in artifact["released"].items()}, details


# ---------------------------------------------------------------------------------------------------------------
# audits
# ---------------------------------------------------------------------------------------------------------------
def audit_settings(config: Config) -> AuditSettings:
    """The one :class:`AuditSettings` of every audit of the chapter."""
    return AuditSettings(seed=config.seed, attacker_share=config.attacker_share, attacker_seeds=config.attacker_seeds,
                         identity_epochs=config.identity_epochs, identity_backbone=config.backbone,
                         classifier_epochs=config.classifier_epochs, classifier_backbone=config.backbone,
                         bootstrap_resamples=config.bootstrap, device=config.device)


def _float_images(images: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0


def audit(data: ModalityData, released: np.ndarray, config: Config) -> tuple[AuditReport, bool]:
    """The audit of one release (cached); returns ``(report, loaded_from_cache)``."""
    description = {"original": content_hash(data.images), "patients": content_hash(data.patients.tolist()),
                   "released": content_hash(released), "source": data.member_rows.tolist(),
                   "sex": data.sex.tolist(), "tasks": {name: content_hash(values) for name, values in data.tasks.items()},
                   "audit": config.audit_description(), "device": str(config.device)}
    # The audit is a function of its inputs (hashed above) and of the audit's code: keying it on the audit module's
    # source (not this chapter's) keeps the cached audits when only the chapter's tables, claims or figures change.
    cache = ArtifactCache("tradeoffs-audit", owner="anonpaper.audit.suite")
    if cache.exists(description):
        return cache.load(description), True

    def build() -> AuditReport:
        return audit_release(_float_images(data.images), _float_images(released), data.patients,
                             source=data.member_rows, sensitive=data.sex, sensitive_name="sex", tasks=data.tasks,
                             settings=audit_settings(config))

    return cache.get_or_create(description, build), False


def report_rows(report: AuditReport, modality: str, setting: Setting) -> list[dict[str, Any]]:
    """One row per audited score of ``report``."""
    rows = []
    for section, groups in (("threat", report.threats), ("utility", report.utility)):
        for group, scores in groups.items():
            for name, score in scores.items():
                rows.append({"modality": modality, "method": setting.method, "knob": setting.knob,
                             "setting": np.nan if setting.value is None else setting.value, "label": setting.label,
                             "section": section, "group": group, "score": name, "metric": score.metric,
                             "value": score.value, "se": score.se, "chance": score.chance,
                             "original": score.original, "original_se": score.original_se,
                             "advantage_retained": score.advantage_retained,
                             "advantage_retained_se": score.advantage_retained_se, "n_images": score.n_images,
                             "n_patients": score.n_patients, "reason": score.reason})
    return rows


# ---------------------------------------------------------------------------------------------------------------
# the whole chapter
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ModalityOutcome:
    """Everything one modality's run produced.

    Attributes:
        data: The cohort (:class:`ModalityData`).
        settings: The releases audited, in order.
        scores: One row per (setting, score) (:func:`report_rows`).
        counts: The audit's counts (the same split for every setting).
        examples: setting label -> uint8 ``(H, W, C)`` release of the first member image.
        seconds: setting label -> seconds of its release and audit (a cached audit: the loading).
        cached: setting labels whose audit was loaded from the cache.
    """

    data: ModalityData
    settings: list[Setting]
    scores: pd.DataFrame
    counts: dict[str, int]
    examples: dict[str, np.ndarray]
    seconds: dict[str, float]
    cached: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    """The chapter's results: per modality, and what the GAN methods did.

    Attributes:
        config: The :class:`Config`.
        modalities: ``"fundus"`` / ``"cxr"`` -> :class:`ModalityOutcome`.
        gan: Details of the GAN releases (generator source, kimg, inversion PSNR, seconds), empty when none ran.
        not_audited: GAN methods of the study the audit does not run, with the reason.
        seconds: Wall seconds of :func:`run`.
    """

    config: Config
    modalities: dict[str, ModalityOutcome]
    gan: dict[str, Any]
    not_audited: dict[str, str]
    seconds: float

    def scores(self) -> pd.DataFrame:
        """Every modality's score rows in one frame."""
        return pd.concat([outcome.scores for outcome in self.modalities.values()], ignore_index=True)


def run(config: Config, generator_config: Any = None, log: Callable[[str], None] | None = None) -> Outcome:
    """Build both cohorts, release them by every method and knob, and audit every release.

    Args:
        config: The chapter's :class:`Config`.
        generator_config: The generators chapter's config at ``config.generators_profile`` (from
            :func:`anonpaper.runner.study_config`); needed when ``config.gan_methods`` names a method.
        log: Called with one progress line per audit; None is silent.

    Returns:
        :class:`Outcome`.
    """
    log = log or (lambda line: None)
    started = time.perf_counter()
    if config.gan_methods and generator_config is None:
        raise ValueError(f"GAN_METHODS {list(config.gan_methods)} need the generators chapter's config "
                         "(generator_config)")
    outcomes, gan = {}, {}
    for name in MODALITIES:
        data = load_modality(config, name)
        settings = settings_for(config, name)
        gan_releases = None
        if any(setting.method == "k-salsa" for setting in settings):
            gan_releases, gan["k-salsa"] = ksalsa_releases(data, config, generator_config, log)
        rows, examples, seconds, cached, counts = [], {}, {}, [], {}
        for setting in settings:
            tick = time.perf_counter()
            released = release(data, setting, config, gan_releases)
            report, from_cache = audit(data, released, config)
            rows += report_rows(report, name, setting)
            examples[setting.label] = released[0]
            seconds[setting.label] = time.perf_counter() - tick
            counts = report.counts
            if from_cache:
                cached.append(setting.label)
            log(f"{MODALITIES[name]}: {setting.label}: {seconds[setting.label]:.0f} s"
                + (" (cached audit)" if from_cache else ""))
        outcomes[name] = ModalityOutcome(data=data, settings=settings, scores=pd.DataFrame(rows), counts=counts,
                                         examples=examples, seconds=seconds, cached=cached)
    not_audited = dict(NOT_AUDITED)
    if "k-salsa" not in config.gan_methods:
        not_audited["k-SALSA (paper 4)"] = "left out by GAN_METHODS in this run"
    return Outcome(config=config, modalities=outcomes, gan=gan, not_audited=not_audited,
                   seconds=time.perf_counter() - started)
