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
   zero-information release); and the learned methods, each with the networks and recipe of the chapter that
   reproduces it (:func:`learned_releases`): k-SALSA (k) and paper 1's vessel edit with StyleSpace at the same
   image change (alpha) on the generators chapter's fundus StyleGAN2, GMIA's latent optimisation (margin m) and
   the disentanglement identity swap (strength) on chest X-rays. Every release is paired with its source images: a
   method that releases one image per cluster (k-same, k-SALSA) stands that image in for each member's image, so
   every method is audited alike.
3. **Audits.** One :func:`anonpaper.audit.audit_release` per (method, knob) on the same originals, members and
   audit seed, so every audit splits the patients into the same attacker-train and attacked sides. A finished
   audit is cached (:class:`anonpaper.cache.ArtifactCache`, keyed by the original and released pixels, the labels,
   the audit settings and the audit's code), so a rerun loads it. One :class:`anonpaper.audit.NetworkMemo` per
   modality lets the networks that learn only from the originals (the reference linkage, attribute and task models)
   train once for all of its audits; the reports are the same as without it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from anonpaper import methods
from anonpaper.audit import AuditReport, AuditSettings, NetworkMemo, audit_release
from anonpaper.cache import ArtifactCache
from anonpaper.data import load_cohort
from anonpaper.experiments.k_salsa.release import GENERATOR_KIND
from anonpaper.experiments.tradeoffs.config import Config
from anonpaper.runtime import content_hash, derive_seed

MODALITIES = {"fundus": "fundus", "cxr": "chest X-ray"}
NO_CHANGE, CONSTANT = "no change", "constant"
METHOD_LABELS = {NO_CHANGE: "no change", CONSTANT: "constant image", "blur": "blur", "pixelate": "pixelation",
                 "gaussian-noise": "Gaussian noise", "snow": "Snow", "vs-snow": "VS-Snow",
                 "k-same-pixel": "k-same pixel", "k-salsa": "k-SALSA", "sspace-vessel-edit": "S-space vessel edit",
                 "stylespace": "StyleSpace", "gmia": "GMIA", "identity-swap": "identity swap"}
KNOBS = {"blur": ("sigma", "blur_sigmas"), "pixelate": ("block_size", "pixelate_blocks"),
         "gaussian-noise": ("sigma", "noise_sigmas"), "snow": ("p", "snow_p"), "vs-snow": ("p", "snow_p"),
         "k-same-pixel": ("k", "k_values"), "k-salsa": ("k", "ksalsa_k_values"),
         "sspace-vessel-edit": ("alpha", "vessel_alphas"), "stylespace": ("alpha", "vessel_alphas"),
         "gmia": ("margin", "gmia_margins"), "identity-swap": ("strength", "swap_strengths")}
KNOB_SYMBOLS = {"sigma": "σ", "block_size": "block", "p": "p", "k": "k", "alpha": "α", "margin": "m",
                "strength": "strength"}
FUNDUS_ONLY = ("vs-snow", "k-salsa", "sspace-vessel-edit", "stylespace")
CXR_ONLY = ("gmia", "identity-swap")
# The methods the papers of the study propose (the others are the trivial baselines and the papers' baselines).
PAPER_METHODS = ("snow", "vs-snow", "k-salsa", "sspace-vessel-edit", "gmia", "identity-swap")
# The learned methods' releases: the vessel edits' names in the vascular chapter.
VESSEL_EDITS = {"sspace-vessel-edit": "ours", "stylespace": "StyleSpace"}
# Which chapters' configs each learned method needs (the generators chapter's for the generator-based ones).
NEEDS = {"k-salsa": ("02_generators",), "sspace-vessel-edit": ("02_generators", "03_vascular_sspace"),
         "stylespace": ("02_generators", "03_vascular_sspace"), "gmia": ("02_generators", "04_gmia"),
         "identity-swap": ("06_disentanglement",)}
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
        if (method in FUNDUS_ONLY and modality != "fundus") or (method in CXR_ONLY and modality != "cxr"):
            continue
        if method in NEEDS and method not in config.gan_methods:
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
    elif setting.method in NEEDS:
        if gan_releases is None or setting not in gan_releases:
            raise ValueError(f"{setting.label}: the learned methods' releases were not built (learned_releases)")
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
    from anonpaper.experiments.generators.pipeline import generator_description
    from anonpaper.experiments.k_salsa.config import Config as KSalsaConfig
    from anonpaper.experiments.k_salsa.release import k_salsa_release

    recipe = KSalsaConfig()
    sources = data.images[data.member_rows]
    patients = data.patients[data.member_rows]
    description = {"members": content_hash(sources), "patients": patients.tolist(),
                   "generator": generator_description(GENERATOR_KIND, generator_config),
                   "projector_steps": config.projector_steps, "alignment_steps": config.alignment_steps,
                   "k": list(config.ksalsa_k_values), "seed": config.seed,
                   "recipe": [recipe.alignment_lr, recipe.content_weight, recipe.style_weight, recipe.patch_grid,
                              recipe.projector_batch]}

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


def _cached_releases(namespace: str, owner: str, description: dict, build: Callable[[], dict]) -> dict:
    """A learned method's releases, cached by the members' pixels and the recipe, keyed on the code that builds them
    (``owner``'s package), not on this chapter's."""
    return ArtifactCache(namespace, owner=owner).get_or_create(description, build)


def learned_releases(data: ModalityData, config: Config, configs: dict[str, Any],
                     log: Callable[[str], None] = lambda line: None) -> tuple[dict[Setting, np.ndarray], dict]:
    """Every learned method's releases of ``data``'s members at every knob value, each built from the chapter that
    reproduces it (:mod:`anonpaper.experiments.releases`): k-SALSA (:func:`ksalsa_releases`), paper 1's vessel
    edit and StyleSpace (one channel ranking and one projection for both, every alpha), GMIA at every margin and the
    identity swap at every strength.

    Args:
        data: The modality's cohort.
        config: The chapter's config (``gan_methods`` and the knob sweeps).
        configs: Study name -> that chapter's config at ``config.generators_profile`` (:data:`NEEDS` says which).
        log: One line per stage.

    Returns:
        ``({Setting: uint8 (M, H, W, C)}, {method: details})``.
    """
    from anonpaper.experiments.disentanglement.release import identity_swap_releases
    from anonpaper.experiments.gmia.release import gmia_releases
    from anonpaper.experiments.vascular.release import vessel_edit_releases

    settings = [setting for setting in settings_for(config, data.name) if setting.method in NEEDS]
    methods = list(dict.fromkeys(setting.method for setting in settings))
    sources = data.images[data.member_rows]
    releases: dict[Setting, np.ndarray] = {}
    details: dict[str, Any] = {}

    def recipe(study: str) -> dict:
        return configs[study].parameters()

    if "k-salsa" in methods:
        built, details["k-salsa"] = ksalsa_releases(data, config, configs["02_generators"], log)
        releases.update(built)
    edits = [method for method in methods if method in VESSEL_EDITS]
    if edits:
        # The vascular chapter's recipe, with this chapter's projector steps (one inversion budget for every
        # learned fundus method).
        vascular = dataclasses.replace(configs["03_vascular_sspace"], projector_steps=config.projector_steps)
        description = {"members": content_hash(sources), "methods": edits, "alphas": list(config.vessel_alphas),
                       "seed": config.seed, "generators": recipe("02_generators"), "vascular": vascular.parameters()}

        def build_edits() -> dict:
            built, info = vessel_edit_releases(sources, [VESSEL_EDITS[method] for method in edits],
                                               config.vessel_alphas, configs["02_generators"], vascular,
                                               seed=derive_seed(config.seed, "vessel-edit"), log=log)
            return {"released": built, "details": info}

        artifact = _cached_releases("tradeoffs-vessel-edits", "anonpaper.experiments.vascular.pipeline",
                                    description, build_edits)
        for method in edits:
            details[method] = artifact["details"]
            for alpha in config.vessel_alphas:
                releases[Setting(method, "alpha", float(alpha))] = artifact["released"][(VESSEL_EDITS[method],
                                                                                         float(alpha))]
    if "gmia" in methods:
        # Keyed on the chest X-ray generator's architecture (what co-training reads of the generators chapter),
        # not on that chapter's whole recipe: a change to the fundus generators does not redo these releases.
        description = {"members": content_hash(sources), "margins": list(config.gmia_margins),
                       "generator": configs["02_generators"].stylegan_config("cxr-sg2").to_dict(),
                       "gmia": recipe("04_gmia")}

        def build_gmia() -> dict:
            built, info = gmia_releases(sources, configs["02_generators"], configs["04_gmia"],
                                        margins=config.gmia_margins, log=log)
            return {"released": built, "details": info}

        artifact = _cached_releases("tradeoffs-gmia", "anonpaper.experiments.gmia.pipeline", description, build_gmia)
        details["gmia"] = artifact["details"]
        for margin in config.gmia_margins:
            releases[Setting("gmia", "margin", float(margin))] = artifact["released"][float(margin)]
    if "identity-swap" in methods:
        description = {"members": content_hash(sources), "strengths": list(config.swap_strengths),
                       "seed": config.seed, "disentanglement": recipe("06_disentanglement")}

        def build_swap() -> dict:
            built, info = identity_swap_releases(sources, "cxr", config.swap_strengths, configs["06_disentanglement"],
                                                 seed=derive_seed(config.seed, "identity-swap"), log=log)
            return {"released": built, "details": info}

        artifact = _cached_releases("tradeoffs-identity-swap", "anonpaper.experiments.disentanglement.pipeline",
                                    description, build_swap)
        details["identity-swap"] = artifact["details"]
        for strength in config.swap_strengths:
            releases[Setting("identity-swap", "strength", float(strength))] = artifact["released"][float(strength)]
    return releases, details


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


def audit(data: ModalityData, released: np.ndarray, config: Config,
          networks: NetworkMemo | None = None) -> tuple[AuditReport, bool]:
    """The audit of one release (cached); returns ``(report, loaded_from_cache)``. ``networks`` shares the networks
    that learn only from the originals with the modality's other audits (the report is the same without it)."""
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
                             settings=audit_settings(config), networks=networks)

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


def run(config: Config, generator_config: Any = None, log: Callable[[str], None] | None = None,
        chapter_configs: dict[str, Any] | None = None) -> Outcome:
    """Build both cohorts, release them by every method and knob, and audit every release.

    Args:
        config: The chapter's :class:`Config`.
        generator_config: The generators chapter's config at ``config.generators_profile`` (from
            :func:`anonpaper.runner.study_config`); needed when ``config.gan_methods`` names a generator-based method.
        log: Called with one progress line per audit; None is silent.
        chapter_configs: Study name -> the config of each other chapter whose networks a learned method uses, at
            ``config.generators_profile`` (:data:`NEEDS` says which).

    Returns:
        :class:`Outcome`.

    Raises:
        ValueError: A learned method in ``config.gan_methods`` whose chapter config was not given.
    """
    log = log or (lambda line: None)
    started = time.perf_counter()
    configs = {**(chapter_configs or {}), **({"02_generators": generator_config} if generator_config else {})}
    missing = sorted({study for method in config.gan_methods for study in NEEDS[method]} - set(configs))
    if missing:
        raise ValueError(f"GAN_METHODS {list(config.gan_methods)} need the configs of {missing} "
                         "(generator_config, chapter_configs)")
    outcomes, gan = {}, {}
    for name in MODALITIES:
        data = load_modality(config, name)
        settings = settings_for(config, name)
        gan_releases = None
        if any(setting.method in NEEDS for setting in settings):
            gan_releases, details = learned_releases(data, config, configs, log)
            gan.update(details)
        rows, examples, seconds, cached, counts = [], {}, {}, [], {}
        networks = NetworkMemo()  # the originals' networks train once for all of this modality's audits
        for setting in settings:
            tick = time.perf_counter()
            released = release(data, setting, config, gan_releases)
            report, from_cache = audit(data, released, config, networks)
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
    not_audited = {METHOD_LABELS[method]: "left out by GAN_METHODS in this run" for method in NEEDS
                   if method not in config.gan_methods}
    return Outcome(config=config, modalities=outcomes, gan=gan, not_audited=not_audited,
                   seconds=time.perf_counter() - started)
