"""The generators chapter's parameters: one frozen config, defaults = the ``quick`` profile."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from anonpaper.experiments.chapter import ChapterConfig, parameter
from anonpaper.models.stylegan.config import StyleGANConfig, get_config, list_configs

PHANTOM_FUNDUS = "phantom-retina"

# What GENERATOR_CHANGES may not set: the chapter's own parameters and the run's schedule set these (image size and
# channels, batch, augmentation, seeds, steps, checkpoints, folders).
FIXED_ARCHITECTURE_FIELDS = ("architecture", "resolution", "image_channels", "description")
FIXED_RECIPE_FIELDS = ("total_steps", "batch_size", "batch_gpu", "augment", "seed", "checkpoint_every",
                       "sample_every", "metrics_every", "log_every", "sample_count", "output_dir", "progress")

# The three generators the GAN chapters share: kind -> (dataset, config field of its StyleGAN config, of its kimg,
# image channels).
KINDS: dict[str, tuple[str, str, str, int]] = {
    "fundus-sg3t": ("phantom-retina", "fundus_sg3t_config", "fundus_sg3t_kimg", 3),
    "fundus-sg2": ("phantom-retina", "fundus_sg2_config", "fundus_sg2_kimg", 3),
    "cxr-sg2": ("phantom-cxr", "cxr_sg2_config", "cxr_sg2_kimg", 1),
}


@dataclass(frozen=True)
class Config(ChapterConfig):
    """Everything that determines the chapter's cohorts, generators and numbers (see the help texts)."""

    seed: int = parameter(0, "Seed of every random draw (cohorts, networks, evaluation samples).")
    dataset: str = parameter(PHANTOM_FUNDUS, "Fundus dataset the two fundus generators learn: 'phantom-retina' "
                                             "(generated here) or a registered real fundus dataset (paper 1: "
                                             "'odir-5k'), which also needs DATA_ROOT. The chest X-ray generator "
                                             "always learns the phantom.")
    data_root: str | None = parameter(None, "Folder of your copy of the real fundus dataset (None: the phantom); "
                                            "only read, never downloaded (layout: data_manifests/<name>.yaml).")
    data_protocol: str | None = parameter(None, "Split protocol of the real dataset (data_manifests/<name>.yaml; "
                                                "None: its default, for ODIR-5K 'paper1': 3000 training and 500 "
                                                "testing images).")
    vessel_data_root: str | None = parameter(None, "Folder of a DRIVE copy to train the vessel U-Net on (its "
                                                   "training images train it, its test images check its Dice). "
                                                   "None: the phantom's exact vessel masks, a domain gap on real "
                                                   "photographs (ODIR-5K has no vessel masks).")
    image_size: int = parameter(128, "Square image side in pixels of the fundus cohorts and generators (the papers: "
                                     "256; quick: 128, the smallest side at which the instruments work: a SIFT "
                                     "matcher tells same-patient from different-patient pairs of real phantom "
                                     "images with AUROC 0.84 at 64 px and 0.98 at 128 px).")
    cxr_image_size: int = parameter(64, "Square image side in pixels of the chest X-ray generator (GMIA; the paper: "
                                        "256; quick: 64, the shipped generator's, weights/cxr-sg2.pt).")
    retina_patients: int = parameter(300, "Phantom fundus patients (about two eyes each).")
    cxr_patients: int = parameter(120, "Phantom chest X-ray patients of the chapter's cohort (several studies "
                                       "each; the generator learns its own population of 1,000): the findings "
                                       "classifier that reads the label check trains on their training images.")
    fundus_sg3t_config: str = parameter("sg3t-tiny", "StyleGAN3-T config of the fundus generator "
                                                     "(anonpaper.models.stylegan.list_configs; paper: sg3t-paper256).")
    fundus_sg2_config: str = parameter("sg2-cpu128", "StyleGAN2 config of the fundus generator (paper: sg2-paper256; "
                                                     "quick: the shipped one, weights/fundus-sg2.pt, 32 feature maps "
                                                     "at 128 px, chosen for the CPU by the rule in weights/README.md).")
    cxr_sg2_config: str = parameter("sg2-cpu64", "StyleGAN2 config of the chest X-ray generator, made grayscale "
                                                 "(paper: sg2-gmia256; quick: the shipped one, chosen for the CPU).")
    fundus_sg3t_kimg: float = parameter(16.0, "Thousands of real images shown to the fundus StyleGAN3-T (the "
                                              "papers: thousands of kimg; quick: about 57 s/kimg on one CPU thread "
                                              "at 128 px, ~15 min; it draws no vessels yet, at 64 px nor at 128 px).")
    fundus_sg2_kimg: float = parameter(300.0, "Thousands of real images shown to the fundus StyleGAN2 (quick: the "
                                              "shipped weights' 300 kimg on a 3,000-patient population, about 200 "
                                              "s/kimg on two CPU threads at 128 px; trained only when no verified "
                                              "file matches).")
    cxr_sg2_kimg: float = parameter(100.0, "Thousands of real images shown to the chest X-ray StyleGAN2 (quick: "
                                           "the shipped weights' 100 kimg, 44 s/kimg on one CPU thread at 64 px; "
                                           "trained only when no verified file matches).")
    batch_size: int = parameter(8, "Images per training step (the papers: 32-64).")
    augment: str = parameter("diffaugment", "Discriminator augmentation for small sets: 'none', 'diffaugment' or "
                                            "'ada'.")
    checkpoint_kimg: float = parameter(1.0, "Thousands of images between checkpoints (an interrupted run resumes "
                                            "from the last one).")
    eval_images: int = parameter(200, "Generated and real images per distribution metric.")
    min_eval_images: int = parameter(100, "Fewest images per set on which a distribution claim is decided.")
    projector_images: int = parameter(8, "Held-out real images inverted by the projector.")
    projector_steps: int = parameter(200, "Projector Adam steps (the StyleGAN2-ADA recipe: 1000).")
    projector_psnr_target: float = parameter(20.0, "PSNR in dB (W+) the projector must reach on held-out images.")
    segmenter_epochs: int = parameter(15, "Epochs of the cohort-trained U-Nets (vessel and lung segmenters) that "
                                          "give the features and the vessel fraction.")
    segmenter_min_dice: float = parameter(0.5, "Below this validation Dice the segmenter is not trusted and the "
                                               "claims that rest on it are undecided.")
    classifier_backbone: str = parameter("resnet10t", "Backbone of the cohort label classifiers that read the DR "
                                                      "grade of fundus images and the findings of chest X-rays, "
                                                      "real and generated (anonpaper.models.classifiers; trained "
                                                      "from scratch). The findings are global (heart size, "
                                                      "effusions): at 64 px 'small_cnn' (a receptive field of about "
                                                      "18 px) reached held-out macro AUROC 0.70 from 120 patients, "
                                                      "under its floor, 'resnet10t' 0.90.")
    classifier_epochs: int = parameter(20, "Epochs of the cohort label classifiers (trained from scratch on the real "
                                           "training images, cached).")
    classifier_augment: float = parameter(1.0, "Strength of the image degradations the cohort label classifiers "
                                               "learn with (anonpaper.train.augment.DegradationAugment: nnU-Net's "
                                               "Gaussian blur, low-resolution simulation and noise, each drawn with "
                                               "nnU-Net's probability times this; 0: none). Without them the quick "
                                               "DR reader, trained on the phantom's sharp renderings, reads its "
                                               "held-out real images saved as JPEG at quality 90 as other grades "
                                               "(0.16 apart in total variation, past the label check's own floor, "
                                               "LABEL_JPEG_QUALITY; benchmarks/label_instrument_probe.py); with "
                                               "nnU-Net's probabilities (1), the smallest strength tried that keeps "
                                               "both readers inside that floor, 0.03 apart, at held-out QWK 0.93.")
    classifier_min_qwk: float = parameter(0.4, "Below this held-out quadratic-weighted kappa the DR classifier is "
                                               "not trusted and the fundus label claims are undecided.")
    classifier_min_auroc: float = parameter(0.7, "Below this held-out macro AUROC the findings classifier is not "
                                                 "trusted and the chest X-ray label claim is undecided.")
    label_tolerance: float = parameter(0.15, "Largest label distance (DR grades: total variation; findings: mean "
                                             "absolute prevalence difference) between generated and real images "
                                             "for the label claim to hold.")
    label_jpeg_quality: int = parameter(90, "The label check's own floor, like the vessel-tree check's: the label "
                                            "classifier's held-out real check images saved as JPEG at this quality "
                                            "(lesions intact, PSNR about 33 dB) must keep the label shares it reads "
                                            "within half of LABEL_TOLERANCE of the unsaved images'; a classifier "
                                            "that reads compressed real images as other labels cannot judge "
                                            "generated ones, and the claim is undecided.")
    fd_ratio: float = parameter(1 / 3, "The FD claim holds when FD(generated, real) lies below this fraction of the "
                                       "untrained generator's FD by more than two SE.")
    mask_tolerance: float = parameter(0.25, "Largest relative difference of the vessel (lung) pixel fraction between "
                                            "generated and real images for the fraction claim to hold.")
    tree_tolerance: float = parameter(0.5, "Largest relative difference of skeleton length per piece and junctions "
                                           "per image (generated vs real) for the vessel-tree claim to hold (a few "
                                           "dozen skeleton pixels per image: looser than the pixel count).")
    tree_min_area: int = parameter(12, "Vessel-mask pieces (8-connected) of fewer pixels are dropped before the "
                                       "vessel-tree statistics. Without it they count the specks that faint "
                                       "high-frequency noise adds to a mask: at 128 px, real images saved as JPEG at "
                                       "quality 90 read 10 px of skeleton per piece against 30 for the same images "
                                       "unsaved; with 12 px dropped, 123 against 154 "
                                       "(benchmarks/tree_instrument_probe.py; 0: keep every piece).")
    tree_jpeg_quality: int = parameter(90, "The vessel-tree check's own floor: the real images saved as JPEG at this "
                                           "quality (vessels intact, PSNR about 33 dB) must keep both tree "
                                           "statistics within half of TREE_TOLERANCE of the unsaved images'; an "
                                           "instrument that fails real images so degraded cannot judge generated "
                                           "trees, and the claim is undecided.")
    memorisation_margin: float = parameter(0.1, "Largest relative shortfall of the generated samples' distance to "
                                                "their nearest training image below that of held-out real images "
                                                "(U-Net features) before the generator is said to copy its training "
                                                "images (a retention claim: samples no closer than unseen images).")
    bootstrap: int = parameter(50, "Bootstrap draws of both image sets for the SEs of FD, fractions, vessel-tree and "
                                   "label distances.")
    weights_dir: str | None = parameter("weights", "Folder of shipped generator weights (relative to the project "
                                                   "root; None: never use shipped weights).")
    train_if_weights_refused: bool = parameter(False, "Train instead of stopping when a shipped weights file is "
                                                      "refused (corrupt, truncated or of another kind; a file "
                                                      "of another config is not used: trained instead).")
    generator_changes: dict | None = parameter(None, "Changes to a generator's StyleGAN config and training recipe, "
                                                     "per kind, for sweeps beyond the named configs, e.g. "
                                                     "{'fundus-sg3t': {'generator_lr': 0.001, 'sg3_first_cutoff': "
                                                     "4.0}} (fields of StyleGANConfig and GANTrainingConfig; None: "
                                                     "the named config with its official recipe). A changed "
                                                     "generator never loads shipped weights.")
    device: str | None = parameter(None, "Device: None picks CUDA when available, else 'cpu' or 'cuda:N'.")

    def __post_init__(self):
        known = list_configs()
        checks = [
            (isinstance(self.seed, int) and self.seed >= 0, f"SEED must be a non-negative integer, got {self.seed!r}"),
            *((isinstance(size, int) and size >= 32 and not size & (size - 1),
               f"{name} must be a power of two >= 32, got {size!r}")
              for name, size in (("IMAGE_SIZE", self.image_size), ("CXR_IMAGE_SIZE", self.cxr_image_size))),
            (isinstance(self.retina_patients, int) and self.retina_patients >= 6,
             f"RETINA_PATIENTS must be an integer >= 6, got {self.retina_patients!r}"),
            (isinstance(self.cxr_patients, int) and self.cxr_patients >= 4,
             f"CXR_PATIENTS must be an integer >= 4, got {self.cxr_patients!r}"),
            (isinstance(self.batch_size, int) and self.batch_size >= 4 and self.batch_size % 4 == 0,
             f"BATCH_SIZE must be a positive multiple of 4 (minibatch-std groups), got {self.batch_size!r}"),
            (self.augment in ("none", "diffaugment", "ada"),
             f"AUGMENT must be 'none', 'diffaugment' or 'ada', got {self.augment!r}"),
            (self.checkpoint_kimg > 0, f"CHECKPOINT_KIMG must be > 0, got {self.checkpoint_kimg!r}"),
            (isinstance(self.eval_images, int) and self.eval_images >= 8,
             f"EVAL_IMAGES must be an integer >= 8, got {self.eval_images!r}"),
            (isinstance(self.projector_images, int) and self.projector_images >= 1,
             f"PROJECTOR_IMAGES must be a positive integer, got {self.projector_images!r}"),
            (isinstance(self.projector_steps, int) and self.projector_steps >= 1,
             f"PROJECTOR_STEPS must be a positive integer, got {self.projector_steps!r}"),
            (isinstance(self.segmenter_epochs, int) and self.segmenter_epochs >= 1,
             f"SEGMENTER_EPOCHS must be a positive integer, got {self.segmenter_epochs!r}"),
            (0.0 <= self.segmenter_min_dice <= 1.0,
             f"SEGMENTER_MIN_DICE must lie in [0, 1], got {self.segmenter_min_dice!r}"),
            (isinstance(self.classifier_epochs, int) and self.classifier_epochs >= 1,
             f"CLASSIFIER_EPOCHS must be a positive integer, got {self.classifier_epochs!r}"),
            (isinstance(self.classifier_augment, (int, float)) and not isinstance(self.classifier_augment, bool)
             and 0 <= self.classifier_augment <= 4,
             f"CLASSIFIER_AUGMENT must be a number in [0, 4] (0: no degradations), got {self.classifier_augment!r}"),
            (isinstance(self.label_jpeg_quality, int) and not isinstance(self.label_jpeg_quality, bool)
             and 1 <= self.label_jpeg_quality <= 95,
             f"LABEL_JPEG_QUALITY must be an integer in [1, 95], got {self.label_jpeg_quality!r}"),
            (isinstance(self.classifier_min_qwk, (int, float)) and -1.0 <= self.classifier_min_qwk <= 1.0,
             f"CLASSIFIER_MIN_QWK must lie in [-1, 1], got {self.classifier_min_qwk!r}"),
            (isinstance(self.classifier_min_auroc, (int, float)) and 0.0 <= self.classifier_min_auroc <= 1.0,
             f"CLASSIFIER_MIN_AUROC must lie in [0, 1], got {self.classifier_min_auroc!r}"),
            (isinstance(self.label_tolerance, (int, float)) and 0.0 < self.label_tolerance <= 1.0,
             f"LABEL_TOLERANCE must lie in (0, 1], got {self.label_tolerance!r}"),
            (isinstance(self.fd_ratio, (int, float)) and 0.0 < self.fd_ratio < 1.0,
             f"FD_RATIO must lie in (0, 1), got {self.fd_ratio!r}"),
            (isinstance(self.mask_tolerance, (int, float)) and self.mask_tolerance > 0,
             f"MASK_TOLERANCE must be > 0, got {self.mask_tolerance!r}"),
            (isinstance(self.tree_tolerance, (int, float)) and self.tree_tolerance > 0,
             f"TREE_TOLERANCE must be > 0, got {self.tree_tolerance!r}"),
            (isinstance(self.tree_min_area, int) and not isinstance(self.tree_min_area, bool)
             and self.tree_min_area >= 0, f"TREE_MIN_AREA must be an integer >= 0, got {self.tree_min_area!r}"),
            (isinstance(self.tree_jpeg_quality, int) and not isinstance(self.tree_jpeg_quality, bool)
             and 1 <= self.tree_jpeg_quality <= 95,
             f"TREE_JPEG_QUALITY must be an integer in [1, 95], got {self.tree_jpeg_quality!r}"),
            (isinstance(self.memorisation_margin, (int, float)) and 0 < self.memorisation_margin < 1,
             f"MEMORISATION_MARGIN must lie in (0, 1), got {self.memorisation_margin!r}"),
            (isinstance(self.bootstrap, int) and not isinstance(self.bootstrap, bool) and self.bootstrap >= 2,
             f"BOOTSTRAP must be an integer >= 2, got {self.bootstrap!r}"),
        ]
        for kind, (_, config_field, kimg_field, _) in KINDS.items():
            name, kimg = getattr(self, config_field), getattr(self, kimg_field)
            checks.append((name in known, f"{config_field.upper()} must be one of {sorted(known)}, got {name!r}"))
            checks.append((isinstance(kimg, (int, float)) and kimg > 0,
                           f"{kimg_field.upper()} must be a number > 0, got {kimg!r}"))
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        from anonpaper.models.classifiers import CLASSIFIER_NAMES

        if self.classifier_backbone not in CLASSIFIER_NAMES:
            raise ValueError(f"CLASSIFIER_BACKBONE must be one of {CLASSIFIER_NAMES}, got {self.classifier_backbone!r}")
        check_data_parameters(self)
        check_generator_changes(self.generator_changes)
        for kind in KINDS:
            try:
                architecture = self.stylegan_config(kind).architecture
                recipe = self.changes_of(kind)[1]
                if recipe:
                    from anonpaper.train.gan import GANTrainingConfig

                    GANTrainingConfig.for_stylegan_config(getattr(self, KINDS[kind][1]), **recipe)
            except (TypeError, ValueError) as error:
                if self.changes_of(kind) == ({}, {}):
                    raise
                raise ValueError(f"GENERATOR_CHANGES[{kind!r}]: {error}") from error
            expected = "sg3t" if kind.endswith("sg3t") else "sg2"
            if architecture != expected:
                raise ValueError(f"{KINDS[kind][1].upper()} must be a {expected} config, got "
                                 f"{getattr(self, KINDS[kind][1])!r} ({architecture})")

    def stylegan_config(self, kind: str):
        """The :class:`StyleGANConfig` of generator ``kind`` at this chapter's image size and channels."""
        if kind not in KINDS:
            raise ValueError(f"unknown generator kind {kind!r}; expected one of {sorted(KINDS)}")
        _, config_field, _, channels = KINDS[kind]
        architecture, _ = self.changes_of(kind)
        return get_config(getattr(self, config_field), resolution=self.image_size_of(kind), image_channels=channels,
                          **architecture)

    def changes_of(self, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(StyleGAN config changes, training recipe changes)`` that ``GENERATOR_CHANGES`` asks of generator
        ``kind`` (both empty by default)."""
        changes = (self.generator_changes or {}).get(kind) or {}
        architecture_fields = {item.name for item in dataclasses.fields(StyleGANConfig)}
        architecture = {name: value for name, value in changes.items() if name in architecture_fields}
        return architecture, {name: value for name, value in changes.items() if name not in architecture}

    def image_size_of(self, kind: str) -> int:
        """Image side of generator ``kind``: ``CXR_IMAGE_SIZE`` for the chest X-ray one, else ``IMAGE_SIZE``."""
        if kind not in KINDS:
            raise ValueError(f"unknown generator kind {kind!r}; expected one of {sorted(KINDS)}")
        return self.image_size if KINDS[kind][0] == PHANTOM_FUNDUS else self.cxr_image_size

    def cohort_size_of(self, kind: str) -> int:
        """Image side of the cohort generator ``kind`` learns (the phantoms' smallest is 64 px; a smaller generator
        sees area-downsampled images, and evaluation upsamples both sets back to this size for the U-Nets)."""
        return max(64, self.image_size_of(kind))

    def kimg(self, kind: str) -> float:
        """Thousands of images generator ``kind`` is trained on."""
        return float(getattr(self, KINDS[kind][2]))

    def total_steps(self, kind: str) -> int:
        """Training steps of generator ``kind`` (kimg rounded up to whole batches)."""
        return max(1, int(round(self.kimg(kind) * 1000 / self.batch_size)))

    @property
    def is_phantom(self) -> bool:
        """Whether the fundus generators learn the phantom (no DATA_ROOT)."""
        return self.data_root is None

    def dataset_name(self, kind: str) -> str:
        """Registry name of the cohort generator ``kind`` learns (DATASET for the fundus generators)."""
        default = KINDS[kind][0]
        return self.dataset if default == PHANTOM_FUNDUS else default

    def cohort_options(self, kind: str) -> dict[str, Any]:
        """``load_cohort`` options of the cohort generator ``kind`` learns (a real copy: its folder, split protocol
        and the images' side after the field-of-view crop)."""
        if KINDS[kind][0] == PHANTOM_FUNDUS and not self.is_phantom:
            return {"root": self.data_root, "image_size": self.cohort_size_of(kind), "seed": self.seed,
                    "protocol": self.data_protocol}
        return self.phantom_options(kind)

    def phantom_options(self, kind: str) -> dict[str, Any]:
        """``load_cohort`` options of the phantom of generator ``kind``'s modality (the instruments that need exact
        phantom masks or keypoints learn it whatever DATASET is)."""
        patients = self.retina_patients if KINDS[kind][0] == PHANTOM_FUNDUS else self.cxr_patients
        return {"n_patients": patients, "image_size": self.cohort_size_of(kind), "seed": self.seed}

    @property
    def cohort_size(self) -> int:
        """Image side of the fundus cohorts (:meth:`cohort_size_of` a fundus kind), where the fundus chapters'
        instruments work."""
        return self.cohort_size_of("fundus-sg2")


def check_generator_changes(changes: Any) -> None:
    """Validate ``GENERATOR_CHANGES``: None, or a mapping from generator kinds to mappings of field names (of
    :class:`~anonpaper.models.stylegan.config.StyleGANConfig` or :class:`~anonpaper.train.gan.GANTrainingConfig`,
    less those the chapter sets) to values (checked when the configs are built).

    Raises:
        ValueError: Naming the kind or field that is not allowed, and what is.
    """
    if changes is None:
        return
    if not isinstance(changes, dict):
        raise ValueError(f"GENERATOR_CHANGES must be None or a mapping kind -> {{field: value}}, got {changes!r}")
    from anonpaper.train.gan import GANTrainingConfig  # torch: only when changes are asked for

    allowed = sorted({item.name for item in dataclasses.fields(StyleGANConfig)} - set(FIXED_ARCHITECTURE_FIELDS)
                     | {item.name for item in dataclasses.fields(GANTrainingConfig)} - set(FIXED_RECIPE_FIELDS))
    for kind, fields in changes.items():
        if kind not in KINDS:
            raise ValueError(f"GENERATOR_CHANGES: unknown generator kind {kind!r}; expected one of {sorted(KINDS)}")
        if not isinstance(fields, dict) or not fields:
            raise ValueError(f"GENERATOR_CHANGES[{kind!r}] must be a non-empty mapping field -> value, got {fields!r}")
        unknown = sorted(name for name in fields if name not in allowed)
        if unknown:
            raise ValueError(f"GENERATOR_CHANGES[{kind!r}]: {unknown} cannot be changed here (the chapter's "
                             f"parameters set size, channels, batch, augmentation, seeds and schedule); fields that "
                             f"can: {', '.join(allowed)}")


def check_data_parameters(config) -> None:
    """Validate a chapter's DATASET / DATA_ROOT / DATA_PROTOCOL / VESSEL_DATA_ROOT fields (names only; the copies
    themselves are checked by :func:`anonpaper.experiments.generators.pipeline.check_data` before any training).

    Raises:
        ValueError: Naming the parameter, what is expected and what was given.
    """
    from anonpaper.data.manifests import available_manifests, load_manifest

    dataset, root, protocol = config.dataset, config.data_root, config.data_protocol
    for name in ("data_root", "vessel_data_root"):
        value = getattr(config, name)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise ValueError(f"{name.upper()} must be a folder path or None, got {value!r}")
    if dataset == PHANTOM_FUNDUS:
        if root is not None:
            raise ValueError(f"DATA_ROOT is {root!r} but DATASET is the phantom {PHANTOM_FUNDUS!r}: set DATASET to "
                             f"the real dataset of that copy (e.g. 'odir-5k')")
        if protocol is not None:
            raise ValueError(f"DATA_PROTOCOL applies to a real dataset; DATASET is the phantom, got {protocol!r}")
        return
    fundus = [name for name in available_manifests() if load_manifest(name).modality == "fundus"]
    if dataset not in fundus:
        raise ValueError(f"DATASET must be {PHANTOM_FUNDUS!r} or a real fundus dataset {fundus}, got {dataset!r}")
    if root is None:
        raise ValueError(f"DATASET {dataset!r} is a real dataset: set DATA_ROOT to the folder of your copy (layout: "
                         f"data_manifests/{dataset}.yaml); nothing is downloaded")
    protocols = sorted(load_manifest(dataset).split_protocols)
    if protocol is not None and protocol not in protocols:
        raise ValueError(f"DATA_PROTOCOL must be None or one of {dataset}'s split protocols {protocols}, got "
                         f"{protocol!r}")
