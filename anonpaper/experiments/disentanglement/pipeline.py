"""The disentanglement pipeline (Montenegro & Cardoso): cohorts -> disentanglement networks -> identity VAEs ->
disentanglement, anonymisation and ablation tables -> re-identification and explanation quality.

1. Two cohorts as grayscale arrays (:func:`load_data`): iris (multi-class identity: every identity is known, so
   images are split 70/10/20 *within* each identity, the cohort's ``split_within_subject``; disease = the
   phantom's disease, the Warsaw set's glaucoma) and chest X-rays (Siamese identity: a patient-level split;
   disease = pleural effusion).
2. One disentanglement network per cohort (:func:`train_network`, cached with :class:`ArtifactCache`).
3. Table 2 (:func:`disentanglement_table`): reconstruction, medical replacement and identity replacement of every
   test image (targets: another test image of another identity and disease), SSIM to the original and to the
   result of two successive replacements (the paper's "generated x2"), identity accuracy of the original and the
   target identity, and disease accuracy / macro-F1 of the expected class. Recognition uses the network's own
   classifiers on the re-encoded image, as the paper does (multi-class: ``C_id``; Siamese: identity-vector
   distance below t = 0.05).
4. Identity VAEs (with the privacy term, and plain) and Table 3 (:func:`anonymisation_table`): the identity of
   every test image replaced by a VAE sample or by the mean of 6 / 12 / all training identities; original-identity
   accuracy, "overall" identity risk (multi-class: the identity classifier's mean maximum confidence, as the
   paper; Siamese: the share of anonymised images within t of some training image's identity) and disease
   accuracy.
5. Table 4 (iris): the realism-loss ablation; Table 5 (chest): a network trained on a fraction of the data.
6. The claims' judges (:class:`Judges`), networks trained on the original images and not on Eq. 1's outputs: an
   ArcFace attacker and a disease classifier (:func:`train_attacker`, :func:`train_disease_classifier`), each
   checked on held-out images, and the decoder's non-collapse checks (:func:`decoder_checks`); identity and
   disease of every kind of test image by these judges (:func:`independent_recognition`), the reconstruction
   (strength 0) being the control of every privacy claim.
7. Beyond the paper (:func:`explanation_privacy`): for each test query the nearest training case by the medical
   vector is the case-based explanation; it is shown with its identity moved towards a VAE sample by a strength
   in ``config.privacy_levels``. The attacker, and an adaptive attacker trained on the originals and the
   network's reconstructions, try to re-identify the explanation among the original training images (rank-1; and
   verification at the judges' threshold), and the independent disease classifier checks that the anonymised
   explanation still shows the query's disease.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from anonpaper.cache import ArtifactCache
from anonpaper.data import load_cohort
from anonpaper.methods.disentangle import (anonymise, decode_vectors, identity_means, nearest_cases, new_identities,
                                           to_uint8)
from anonpaper.experiments.claims import combine_replicate_tables
from anonpaper.experiments.disentanglement.config import Config
from anonpaper.metrics.classification import auroc, macro_f1
from anonpaper.metrics.identity import (cross_pair_scores, reidentification_accuracy, select_threshold,
                                        verification_auc)
from anonpaper.metrics.quality import ssim
from anonpaper.metrics.statistics import patient_bootstrap_se
from anonpaper.models.disentangle import DisentangleModel, IdentityVAE
from anonpaper.runtime import content_hash, derive_seed, get_device, replicate_parts
from anonpaper.train.disentangle import (REALISM_TERMS, SIAMESE_THRESHOLD, LossWeights, encode_all, squared_distance,
                                         image_tensor, pair_pools, to_unit, train_disentangler, train_identity_vae)
from anonpaper.train.loop import TrainSettings

SPLITS = ("train", "val", "test")
# The instrument checks of ``Outcome.instruments`` (each with its floor in Config).
ATTACKER_RANK1 = "validation rank-1 among the training identities"
ATTACKER_AUC = "validation verification AUC"
DISEASE_AUC = "validation AUROC"
DECODER_SPREAD = "output spread / the originals' (test reconstructions)"
DECODER_RETRIEVAL = "reconstructions nearest to their own input"
DATASETS = ("iris", "cxr")
EXPERIMENTS = ("Reconstruction / Baseline", "Medical Replacement", "Identity Replacement")
# Table 4's variants: realism terms, whether the discriminator's inputs are augmented, and a pre-training variant.
ABLATIONS = {
    "Only SSIM": (("ssim",), False, None),
    "Only PSNR": (("psnr",), False, None),
    "SSIM and PSNR": (("ssim", "psnr"), False, None),
    "GAN with SSIM and PSNR": (REALISM_TERMS, False, None),
    "Fine-tuned augmented GAN": (REALISM_TERMS, True, "SSIM and PSNR"),
    "Augmented GAN (Final model)": (REALISM_TERMS, True, None),
}


@dataclass
class DatasetArrays:
    """One cohort as per-split grayscale arrays.

    Attributes:
        key: ``"iris"`` or ``"cxr"``.
        dataset: The registry name.
        images: split -> uint8 (N, H, W).
        disease: split -> int64 (N,) (0 / 1).
        identity: split -> int64 (N,) identity codes shared by all splits.
        patients: split -> (N,) patient ids (str), for patient-clustered bootstrap.
        siamese: Whether identity is learnt with the Siamese loss (no identity classifier).
        num_identities: Number of identity codes.
        description: JSON-like description of the content (cache keys).
    """

    key: str
    dataset: str
    images: dict[str, np.ndarray]
    disease: dict[str, np.ndarray]
    identity: dict[str, np.ndarray]
    patients: dict[str, np.ndarray]
    siamese: bool
    num_identities: int
    description: dict[str, Any]

    def split(self, name: str, fraction: float = 1.0, seed: int = 0) -> dict[str, np.ndarray]:
        """``{"images", "disease", "identity"}`` of a split; ``fraction`` < 1 keeps a random share of its patients."""
        rows = np.arange(len(self.images[name]))
        if fraction < 1.0:
            patients = np.unique(self.patients[name])
            rng = np.random.default_rng(seed)
            kept = rng.choice(patients, max(2, int(round(fraction * len(patients)))), replace=False)
            rows = np.flatnonzero(np.isin(self.patients[name], kept))
        return {"images": self.images[name][rows], "disease": self.disease[name][rows],
                "identity": self.identity[name][rows]}


def _resize(image: np.ndarray, size: int) -> np.ndarray:
    import cv2

    if image.ndim == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    if image.shape != (size, size):
        image = cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA)
    return image


def _arrays(cohort, key: str, size: int, split_column: str, identity_column: str, disease_column: str,
            siamese: bool, progress: bool) -> DatasetArrays:
    table = cohort.table
    for column in (split_column, identity_column, disease_column):
        if column not in table.columns:
            raise ValueError(f"cohort {cohort.name!r} lacks the column {column!r} this chapter needs")
    keep = np.flatnonzero(table[disease_column].isin([0, 1]).to_numpy())
    iterator = keep
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(keep, desc=f"loading {cohort.name}", leave=False)
    images = np.stack([_resize(cohort.image(int(index)), size) for index in iterator])
    rows = table.iloc[keep].reset_index(drop=True)
    codes = np.unique(rows[identity_column].astype(str).to_numpy(), return_inverse=True)[1].astype(np.int64)
    disease = rows[disease_column].to_numpy().astype(np.int64)
    split = rows[split_column].to_numpy()
    arrays = DatasetArrays(key, cohort.name, {}, {}, {}, {}, siamese, int(codes.max()) + 1, {})
    for name in SPLITS:
        selected = split == name
        if selected.sum() < 2:
            raise ValueError(f"cohort {cohort.name!r}: split {name!r} has {selected.sum()} usable images")
        arrays.images[name] = images[selected]
        arrays.disease[name] = disease[selected]
        arrays.identity[name] = codes[selected]
        arrays.patients[name] = rows["patient_id"].astype(str).to_numpy()[selected]
    arrays.description = {"dataset": cohort.name, "images": int(len(images)), "size": size, "split": split_column,
                          "content": content_hash(images, codes, disease, split.astype(str))}
    return arrays


def load_data(config: Config, progress: bool = False) -> dict[str, DatasetArrays]:
    """The iris and chest cohorts at ``config``'s sizes as :class:`DatasetArrays` (keys ``"iris"``, ``"cxr"``)."""
    if config.iris_data_root is None and config.iris_dataset == "phantom-iris":
        iris = load_cohort("phantom-iris", n_subjects=config.iris_subjects, images_per_eye=config.iris_images_per_eye,
                           image_size=max(64, config.image_size), seed=config.seed)
    else:
        iris = load_cohort(config.iris_dataset, root=config.iris_data_root)
    if config.cxr_data_root is None and config.cxr_dataset == "phantom-cxr":
        cxr = load_cohort("phantom-cxr", n_patients=config.cxr_patients,
                          images_per_patient=config.cxr_images_per_patient, image_size=max(64, config.image_size),
                          seed=config.seed, prevalence={"pleural_effusion": config.cxr_effusion_prevalence})
        disease_column = "true_pleural_effusion"
    else:
        cxr = load_cohort(config.cxr_dataset, root=config.cxr_data_root)
        disease_column = "label_pleural_effusion"
    return {"iris": _arrays(iris, "iris", config.image_size, "split_within_subject", "identity", "disease", False,
                            progress),
            "cxr": _arrays(cxr, "cxr", config.image_size, "split", "patient_id", disease_column, True, progress)}


def data_summary(data: dict[str, DatasetArrays]) -> pd.DataFrame:
    """Images, identities and disease share per cohort and split."""
    rows = []
    for key, arrays in data.items():
        for name in SPLITS:
            rows.append({"cohort": key, "split": name, "images": len(arrays.images[name]),
                         "identities": len(np.unique(arrays.identity[name])),
                         "disease_share": float(np.mean(arrays.disease[name]))})
    return pd.DataFrame(rows).set_index(["cohort", "split"])


# ---------------------------------------------------------------------------------------------------------------
# networks
# ---------------------------------------------------------------------------------------------------------------
def build_network(arrays: DatasetArrays, config: Config, seed_tag: str = "") -> DisentangleModel:
    torch.manual_seed(derive_seed(config.seed, "disentangler-init", arrays.key, seed_tag))
    dims = config.iris_dims if arrays.key == "iris" else config.cxr_dims
    return DisentangleModel(1, config.image_size, 2, None if arrays.siamese else arrays.num_identities,
                            width=config.width, dims=dims, noise=config.noise)


def loss_weights(arrays: DatasetArrays, config: Config, terms: tuple[str, ...] = REALISM_TERMS,
                 augment: bool = True) -> LossWeights:
    medical, identity, realism, disentangle = config.iris_weights if arrays.key == "iris" else config.cxr_weights
    return LossWeights(medical=medical, identity=identity, realism=realism, disentangle=disentangle,
                       alpha=config.alpha, realism_terms=tuple(terms), augment=augment,
                       both_swaps=config.both_swaps)


def train_network(arrays: DatasetArrays, config: Config, *, variant: str = "Augmented GAN (Final model)",
                  epochs: int | None = None, fraction: float = 1.0, device: torch.device | None = None,
                  progress: bool = False, cache: ArtifactCache | None = None) -> tuple[DisentangleModel, dict]:
    """Train (or load) a disentanglement network of ``arrays`` with the realism variant ``variant`` (a key of
    :data:`ABLATIONS`) for ``epochs`` (default ``config.epochs``) on ``fraction`` of the training patients."""
    if variant not in ABLATIONS:
        raise ValueError(f"variant must be one of {list(ABLATIONS)}, got {variant!r}")
    cache = cache or ArtifactCache("disentangle-networks")
    epochs = epochs or config.epochs
    terms, augment, pretrained = ABLATIONS[variant]
    description = {"cohort": arrays.description, "network": config.network_description(arrays.key),
                   "variant": variant, "epochs": epochs, "fraction": fraction}
    cached = cache.exists(description)

    def build() -> dict:
        started = time.perf_counter()
        if pretrained is not None:
            model = train_network(arrays, config, variant=pretrained, epochs=epochs, fraction=fraction, device=device,
                                  progress=progress, cache=cache)[0]
            run_epochs = max(1, epochs // 2)
        else:
            model, run_epochs = build_network(arrays, config, variant), epochs
        result = train_disentangler(
            model, arrays.split("train", fraction, derive_seed(config.seed, "fraction")), arrays.split("val"),
            TrainSettings(epochs=run_epochs, batch_size=config.batch_size, lr=config.lr,
                          seed=derive_seed(config.seed, "disentangler", arrays.key, variant, fraction),
                          device=device, progress=progress),
            loss_weights(arrays, config, terms, augment), discriminator_lr=config.discriminator_lr)
        return {"model": result.model.cpu(), "history": result.history, "best_epoch": result.best_epoch,
                "seconds": time.perf_counter() - started}

    artifact = cache.get_or_create(description, build)
    model = artifact["model"].to(device or "cpu").eval()
    return model, {"cached": cached, "best_epoch": artifact["best_epoch"], "seconds": artifact["seconds"],
                   "history": artifact["history"]}


def train_vae(model: DisentangleModel, arrays: DatasetArrays, config: Config, privacy: bool,
              device: torch.device | None = None, progress: bool = False) -> tuple[IdentityVAE, dict]:
    """Train (or load) the identity VAE on the training identity vectors; ``privacy`` adds Eq. 5 (multi-class:
    maximum entropy of ``C_id``) or Eq. 7 (Siamese: hinge distances)."""
    cache = ArtifactCache("disentangle-vae")
    identity = encode_all(model, image_tensor(arrays.images["train"]), device)[1]
    kind = ("hinge" if arrays.siamese else "entropy") if privacy else "none"
    description = {"identity": content_hash(identity.numpy().round(5)), "privacy": kind, "epochs": config.vae_epochs,
                   "latent": config.vae_latent[1 if arrays.siamese else 0], "seed": config.seed}
    cached = cache.exists(description)

    def build() -> dict:
        started = time.perf_counter()
        torch.manual_seed(derive_seed(config.seed, "vae-init", arrays.key, kind))
        vae = IdentityVAE(identity.shape[1], config.vae_latent[1 if arrays.siamese else 0])
        result = train_identity_vae(vae, identity, TrainSettings(epochs=config.vae_epochs, seed=derive_seed(
            config.seed, "vae", arrays.key, kind), device=device, progress=progress), privacy=kind,
            identity_classifier=None if arrays.siamese else model.identity_classifier,
            identities=arrays.identity["train"])
        return {"model": result.model.cpu(), "history": result.history, "seconds": time.perf_counter() - started}

    artifact = cache.get_or_create(description, build)
    if model.identity_classifier is not None:
        for parameter in model.identity_classifier.parameters():
            parameter.requires_grad_(True)
    return artifact["model"].eval(), {"cached": cached, "seconds": artifact["seconds"], "best_epoch": None,
                                      "history": artifact["history"]}


# ---------------------------------------------------------------------------------------------------------------
# recognition with the network's own classifiers
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Encoded:
    """Vectors of a batch of images (CPU float tensors (N, D))."""

    medical: torch.Tensor
    identity: torch.Tensor
    other: torch.Tensor

    @classmethod
    def of(cls, model: DisentangleModel, images: torch.Tensor) -> "Encoded":
        return cls(*encode_all(model, images))


def disease_prediction(model: DisentangleModel, encoded: Encoded) -> np.ndarray:
    with torch.no_grad():
        return model.disease_classifier.cpu()(encoded.medical).argmax(1).numpy()


def identity_probabilities(model: DisentangleModel, encoded: Encoded) -> np.ndarray:
    with torch.no_grad():
        return torch.softmax(model.identity_classifier.cpu()(encoded.identity), dim=1).numpy()


def same_identity(first: torch.Tensor, second: torch.Tensor) -> np.ndarray:
    """Siamese decision: squared Euclidean distance of identity vectors below t (row-wise)."""
    return (squared_distance(first, second) < SIAMESE_THRESHOLD).numpy()


def _picks(pools: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    return np.array([pool[rng.integers(len(pool))] for pool in pools])


def _mean_se(values: np.ndarray, patients: np.ndarray, config: Config, tag: str) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    se = patient_bootstrap_se(values, values, patients, lambda truth, _: float(np.mean(truth)), config.bootstrap,
                              derive_seed(config.seed, "bootstrap", tag))
    return float(values.mean()), se


def _f1_se(truth: np.ndarray, prediction: np.ndarray, patients: np.ndarray, config: Config, tag: str
           ) -> tuple[float, float]:
    return macro_f1(truth, prediction), patient_bootstrap_se(truth, prediction, patients, macro_f1, config.bootstrap,
                                                             derive_seed(config.seed, "bootstrap-f1", tag))


@dataclass
class Replacements:
    """Table 2's generated images of one cohort's test set (images float ``(N, 1, H, W)`` in [-1, 1]).

    Attributes:
        images: The test originals.
        target: ``(N,)`` test row of each image's target (another identity and, where the data allow, disease).
        same: ``(N,)`` test row of another image of each image's identity (itself when it has no other).
        original: The originals' vectors.
        generated: Experiment (:data:`EXPERIMENTS`) -> (generated once, generated twice) images.
    """

    images: torch.Tensor
    target: np.ndarray
    same: np.ndarray
    original: "Encoded"
    generated: dict[str, tuple[torch.Tensor, torch.Tensor]]


def replacements(model: DisentangleModel, arrays: DatasetArrays, config: Config) -> Replacements:
    """Reconstruction, medical replacement and identity replacement of every test image, once and twice (the
    paper's "generated x2"); targets drawn with a seed of ``config``, so every table of a run uses the same ones."""
    model = model.cpu().eval()
    images = image_tensor(arrays.images["test"])
    rng = np.random.default_rng(derive_seed(config.seed, "table2-targets", arrays.key))
    targets_pool, same_pool = pair_pools(arrays.identity["test"], arrays.disease["test"])
    target, intermediate, same = _picks(targets_pool, rng), _picks(targets_pool, rng), _picks(same_pool, rng)
    original = Encoded.of(model, images)

    def decode(medical, ident, other) -> torch.Tensor:
        return decode_vectors(model, medical, ident, other)

    reconstruction = decode(original.medical, original.identity, original.other)
    generated = {EXPERIMENTS[0]: (reconstruction, decode(*encode_all(model, reconstruction)))}
    for name, index in ((EXPERIMENTS[1], 0), (EXPERIMENTS[2], 1)):
        def replaced(vectors: Encoded, source: np.ndarray) -> torch.Tensor:
            parts = [vectors.medical, vectors.identity, vectors.other]
            parts[index] = [original.medical, original.identity][index][source]
            return decode(*parts)

        first = replaced(original, intermediate)
        generated[name] = (replaced(original, target), replaced(Encoded.of(model, first), target))
    return Replacements(images, target, same, original, generated)


def disentanglement_table(model: DisentangleModel, arrays: DatasetArrays, config: Config,
                          replaced: Replacements | None = None) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Table 2 rows of one cohort (values in [0, 1], each with a patient-bootstrap ``*_se``) and example images,
    recognised by the network's own classifiers, as the paper does (``replaced``: :func:`replacements`, computed
    when not given). Siamese identity compares each image with another image of the patient in question (the
    original's, or the target's), in every row alike."""
    model = model.cpu().eval()
    replaced = replaced or replacements(model, arrays, config)
    images, target, same, original = replaced.images, replaced.target, replaced.same, replaced.original
    disease, identity, patients = arrays.disease["test"], arrays.identity["test"], arrays.patients["test"]

    def unit_ssim(first: torch.Tensor, second: torch.Tensor) -> np.ndarray:
        return ssim(to_unit(first), to_unit(second), reduction="none").numpy()

    rows, examples = [], {"original": arrays.images["test"][:4], "target": arrays.images["test"][target[:4]]}
    for name, (once, twice_) in replaced.generated.items():
        examples[name] = to_uint8(once[:4])
        tag = f"{arrays.key}-{name}"
        row: dict[str, Any] = {"cohort": arrays.key, "experiment": name, "n_test": len(images)}
        row["ssim_original"], row["ssim_original_se"] = _mean_se(unit_ssim(images, once), patients, config, tag + "s")
        row["ssim_x2"], row["ssim_x2_se"] = _mean_se(unit_ssim(once, twice_), patients, config, tag + "x")
        encoded = original if name == EXPERIMENTS[0] else Encoded.of(model, once)
        if arrays.siamese:
            # One pairing protocol for every row: an image is compared with *another* image of the patient in
            # question (a generated image's own original, or the target image whose vector it received, would be
            # an easier match than any other photograph of that patient).
            hit_original = same_identity(encoded.identity, original.identity[same])
            hit_target = same_identity(encoded.identity, original.identity[same[target]])
        else:
            predicted = identity_probabilities(model, encoded).argmax(1)
            hit_original, hit_target = predicted == identity, predicted == identity[target]
        row["identity_original"], row["identity_original_se"] = _mean_se(hit_original, patients, config, tag + "io")
        row["identity_target"], row["identity_target_se"] = _mean_se(hit_target, patients, config, tag + "it")
        expected = disease[target] if name == "Medical Replacement" else disease
        prediction = disease_prediction(model, encoded)
        row["disease_accuracy"], row["disease_accuracy_se"] = _mean_se(prediction == expected, patients, config,
                                                                       tag + "d")
        row["disease_f1"], row["disease_f1_se"] = _f1_se(expected, prediction, patients, config, tag)
        rows.append(row)
    return pd.DataFrame(rows), examples


def training_identity_vectors(model: DisentangleModel, arrays: DatasetArrays) -> torch.Tensor:
    return encode_all(model.cpu().eval(), image_tensor(arrays.images["train"]))[1]


def anonymisation_table(model: DisentangleModel, vaes: dict[str, IdentityVAE], arrays: DatasetArrays,
                        config: Config, replaced: Replacements | None = None
                        ) -> tuple[pd.DataFrame, dict[str, np.ndarray], dict[str, torch.Tensor]]:
    """Table 3 rows of one cohort, recognised by the network's own classifiers as the paper does: every strategy's
    original-identity accuracy (Siamese: against another image of the patient, as in Table 2), overall identity
    risk and disease accuracy (fractions, with patient-bootstrap SEs); four anonymised examples per strategy; and
    every anonymised test image per strategy (float ``(N, 1, H, W)`` in [-1, 1])."""
    model = model.cpu().eval()
    replaced = replaced or replacements(model, arrays, config)
    images, original, same = replaced.images, replaced.original, replaced.same
    disease, identity, patients = arrays.disease["test"], arrays.identity["test"], arrays.patients["test"]
    train_identity = training_identity_vectors(model, arrays)
    _, means = identity_means(train_identity, arrays.identity["train"])
    strategies = {"VAE with overall privacy": ("vae", vaes["privacy"]), "VAE (without privacy term)":
                  ("vae", vaes["plain"])}
    strategies.update({f"Averaging {k} identities": (f"average-{k}", None) for k in config.averaging})
    strategies["Averaging all identities"] = ("average-all", None)
    rows, examples, generated = [], {}, {}
    for label, (strategy, vae) in strategies.items():
        replacement = new_identities(len(images), strategy, seed=derive_seed(config.seed, "anonymise", arrays.key,
                                                                             label), vae=vae, training_means=means)
        anonymised = anonymise(model, original.medical, original.identity, original.other, replacement)[0]
        examples[label], generated[label] = to_uint8(anonymised[:4]), anonymised
        encoded = Encoded.of(model, anonymised)
        tag = f"{arrays.key}-{label}"
        if arrays.siamese:
            hit_original = same_identity(encoded.identity, original.identity[same])
            distance = torch.cdist(encoded.identity, train_identity).pow(2)
            overall = (distance.min(dim=1).values < SIAMESE_THRESHOLD).numpy()
        else:
            probabilities = identity_probabilities(model, encoded)
            hit_original = probabilities.argmax(1) == identity
            overall = probabilities.max(1)
        row = {"cohort": arrays.key, "method": label, "n_test": len(images)}
        row["original_accuracy"], row["original_accuracy_se"] = _mean_se(hit_original, patients, config, tag + "o")
        row["overall"], row["overall_se"] = _mean_se(overall, patients, config, tag + "a")
        row["disease_accuracy"], row["disease_accuracy_se"] = _mean_se(
            disease_prediction(model, encoded) == disease, patients, config, tag + "d")
        rows.append(row)
    return pd.DataFrame(rows), examples, generated


def reconstruction_scores(model: DisentangleModel, arrays: DatasetArrays, config: Config) -> dict[str, float]:
    """Test-set reconstruction SSIM and the baseline identity / disease recognition (Tables 4-5), with SEs."""
    table, _ = disentanglement_table(model, arrays, config)
    row = table.iloc[0]
    return {key: float(row[key]) for key in ("ssim_original", "ssim_original_se", "identity_original",
                                             "identity_original_se", "disease_accuracy", "disease_accuracy_se")}


# ---------------------------------------------------------------------------------------------------------------
# beyond the paper: re-identification of anonymised explanations, and their quality
# ---------------------------------------------------------------------------------------------------------------
def _cached_training(namespace: str, description: dict, train: Callable[[], Any]) -> tuple[torch.nn.Module, dict]:
    """The model of ``train()`` (a :class:`~anonpaper.train.loop.TrainResult`), cached under ``namespace`` by
    ``description``; returns ``(model in eval mode on the CPU, {"cached", "best_epoch", "seconds", "history"})``."""
    cache = ArtifactCache(namespace)
    cached = cache.exists(description)

    def build() -> dict:
        started = time.perf_counter()
        result = train()
        return {"model": result.model.cpu(), "history": result.history, "best_epoch": result.best_epoch,
                "seconds": time.perf_counter() - started}

    artifact = cache.get_or_create(description, build)
    return artifact["model"].eval(), {"cached": cached, "best_epoch": artifact["best_epoch"],
                                      "seconds": artifact["seconds"], "history": artifact["history"]}


def train_attacker(arrays: DatasetArrays, config: Config, device: torch.device | None = None,
                   progress: bool = False, reconstructions: np.ndarray | None = None,
                   replicate: int = 0) -> tuple[torch.nn.Module, dict]:
    """The re-identification attacker: an ArcFace embedding network trained on the original training images and
    identities (cached). With ``reconstructions`` (uint8, the network's reconstructions of the training images, in
    the same order), the adaptive attacker: trained on the originals and the reconstructions together, so that it
    knows what the network's outputs look like and the decoder's blur alone does not hide the identity from it.
    ``replicate`` r > 0 trains the r-th replicate with its own seed (:func:`anonpaper.runtime.replicate_parts`)."""
    from anonpaper.models.embedding import EmbeddingNet
    from anonpaper.train.embedding import train_embedding

    description = {"cohort": arrays.description, "backbone": config.attacker_backbone,
                   "epochs": config.attacker_epochs, "seed": config.seed,
                   "reconstructions": None if reconstructions is None else content_hash(reconstructions),
                   **({"replicate": replicate} if replicate else {})}
    images, identities = arrays.images["train"], arrays.identity["train"]
    if reconstructions is not None:
        images, identities = np.concatenate([images, reconstructions]), np.concatenate([identities, identities])
    tag = "attacker" if reconstructions is None else "adaptive-attacker"

    def train():
        torch.manual_seed(derive_seed(config.seed, f"{tag}-init", arrays.key, *replicate_parts(replicate)))
        return train_embedding(EmbeddingNet(1, 64, config.attacker_backbone), images, identities,
                               TrainSettings(epochs=config.attacker_epochs,
                                             seed=derive_seed(config.seed, tag, arrays.key,
                                                              *replicate_parts(replicate)), device=device,
                                             progress=progress))

    return _cached_training("disentangle-attacker", description, train)


def train_disease_classifier(arrays: DatasetArrays, config: Config, device: torch.device | None = None,
                             progress: bool = False, replicate: int = 0) -> tuple[torch.nn.Module, dict]:
    """The independent disease classifier: ``DISEASE_BACKBONE`` trained from scratch on the original training
    images and their disease labels (cross-entropy, balanced class weights, Adam 1e-3 annealed; best validation
    epoch; cached). It decides the chapter's disease claims instead of the network's own ``C_med``, which the
    disentanglement loss optimises on the very images it would judge. ``replicate`` as in :func:`train_attacker`."""
    from anonpaper.models.classifiers import build_classifier
    from anonpaper.train.classifier import train_classifier

    description = {"cohort": arrays.description, "backbone": config.disease_backbone,
                   "epochs": config.disease_epochs, "seed": config.seed,
                   **({"replicate": replicate} if replicate else {})}

    def train():
        torch.manual_seed(derive_seed(config.seed, "disease-init", arrays.key, *replicate_parts(replicate)))
        return train_classifier(build_classifier(config.disease_backbone, 1, 2),
                                (arrays.images["train"], arrays.disease["train"]),
                                (arrays.images["val"], arrays.disease["val"]),
                                TrainSettings(epochs=config.disease_epochs, batch_size=16, lr=1e-3,
                                              lr_schedule="cosine", seed=derive_seed(config.seed, "disease",
                                                                                     arrays.key,
                                                                                     *replicate_parts(replicate)),
                                              device=device, progress=progress))

    return _cached_training("disentangle-disease", description, train)


def _embed(attacker: torch.nn.Module, images: np.ndarray) -> np.ndarray:
    from anonpaper.train.embedding import embed

    return embed(attacker, images, device=torch.device("cpu"))


@dataclass
class Judges:
    """The networks that decide identity and disease, trained on the original images, never on Eq. 1's outputs.

    Attributes:
        attacker: Identity embedding (uint8 images -> unit vectors).
        disease: Disease classifier (uint8 images -> logits of 2 classes).
        gallery: ``(G, D)`` embeddings of the original training images; ``gallery_identity``: ``(G,)`` identities.
        threshold: Cosine similarity at which two images count as the same identity (F1-optimal on pairs of
            original validation images, or of test images when the validation split has no same-identity pair).
        siamese: Identity by verification against another image of the patient (chest: test patients are unseen
            in training) instead of identification among the training identities (iris).
    """

    attacker: torch.nn.Module
    disease: torch.nn.Module
    gallery: np.ndarray
    gallery_identity: np.ndarray
    threshold: float
    siamese: bool

    def identity_hits(self, images: np.ndarray, identity: np.ndarray, partners: np.ndarray) -> np.ndarray:
        """Per image: is it recognised as ``identity`` (iris: its nearest original training image has that
        identity) or (chest) accepted as the same patient as its partner image (another original image of that
        identity)? ``(N,)`` float in {0, 1}."""
        embeddings = _embed(self.attacker, images)
        if self.siamese:
            similarity = np.sum(embeddings * _embed(self.attacker, partners), axis=1)
            return (similarity >= self.threshold).astype(float)
        nearest = cross_pair_scores(embeddings, self.gallery, kind="cosine").argmax(1)
        return (self.gallery_identity[nearest] == identity).astype(float)

    def overall_hits(self, images: np.ndarray) -> np.ndarray:
        """Per image: does some original training image pass the threshold (someone in the training data is
        recognised in it)? ``(N,)`` float in {0, 1}."""
        similarity = cross_pair_scores(_embed(self.attacker, images), self.gallery, kind="cosine")
        return (similarity.max(1) >= self.threshold).astype(float)

    def disease_hits(self, images: np.ndarray, expected: np.ndarray) -> np.ndarray:
        """Per image: does the disease classifier read ``expected``? ``(N,)`` float in {0, 1}."""
        from anonpaper.train.classifier import predict_proba

        return (predict_proba(self.disease, images).argmax(1) == np.asarray(expected)).astype(float)


def verification_threshold(attacker: torch.nn.Module, arrays: DatasetArrays) -> float:
    """F1-optimal cosine threshold on pairs of original validation images (of test images when the validation
    split has no same-identity pair, as the iris split: one image per identity); NaN without both kinds of pair."""
    for split in ("val", "test"):
        embeddings = _embed(attacker, arrays.images[split])
        upper = np.triu_indices(len(embeddings), k=1)
        same = (arrays.identity[split][:, None] == arrays.identity[split][None, :])[upper]
        if 0 < same.sum() < len(same):
            scores = cross_pair_scores(embeddings, embeddings, kind="cosine")[upper]
            return select_threshold(scores, same.astype(int), higher_means_same=True)
    return float("nan")


def attacker_check(attacker: torch.nn.Module, arrays: DatasetArrays, queries: np.ndarray) -> float:
    """An identity attacker's check on held-out images: iris, rank-1 identification of the validation ``queries``
    (original or reconstructed validation images) among the original training images; chest (test patients are
    unseen), the verification AUC of pairs of a query with another original validation image (same patient or
    not). NaN when it cannot be measured."""
    embeddings = _embed(attacker, queries)
    identity = arrays.identity["val"]
    if not arrays.siamese:
        return reidentification_accuracy(embeddings, identity, _embed(attacker, arrays.images["train"]),
                                         arrays.identity["train"])
    scores = cross_pair_scores(embeddings, _embed(attacker, arrays.images["val"]), kind="cosine")
    off_diagonal = ~np.eye(len(identity), dtype=bool)
    same = (identity[:, None] == identity[None, :])[off_diagonal]
    if not 0 < same.sum() < len(same):
        return float("nan")
    return verification_auc(scores[off_diagonal], same, higher_means_same=True)


def disease_check(classifier: torch.nn.Module, arrays: DatasetArrays) -> float:
    """The disease classifier's AUROC on the original validation images (NaN with one class only)."""
    from anonpaper.train.classifier import predict_proba

    labels = arrays.disease["val"]
    if labels.min() == labels.max():
        return float("nan")
    return auroc(labels, predict_proba(classifier, arrays.images["val"])[:, 1])


def output_spread(images: torch.Tensor) -> float:
    """Mean absolute difference between every pair of images ``(N, C, H, W)`` (any range): how much a set of
    outputs varies across its inputs (a decoder that returns one template for every input gives about 0)."""
    flat = images.flatten(1).double()
    if len(flat) < 2:
        return float("nan")
    distances = torch.cdist(flat, flat, p=1) / flat.shape[1]
    return float(distances.sum() / (len(flat) * (len(flat) - 1)))


def decoder_checks(replaced: Replacements) -> dict[str, float]:
    """The decoder's non-collapse checks on the test set: ``spread`` = :func:`output_spread` of the reconstructions
    over that of the originals (a 2 px Gaussian blur of the phantoms keeps about 0.77; one template repeated, 0),
    and ``retrieval`` = the share of reconstructions whose nearest original (mean absolute difference) is their own
    input (chance: 1 / N)."""
    originals, reconstruction = replaced.images, replaced.generated[EXPERIMENTS[0]][0]
    distances = torch.cdist(reconstruction.flatten(1).double(), originals.flatten(1).double(), p=1)
    retrieval = float((distances.argmin(1) == torch.arange(len(originals))).double().mean())
    return {"spread": output_spread(reconstruction) / output_spread(originals), "retrieval": retrieval}


def independent_recognition(judges: Judges, arrays: DatasetArrays, replaced: Replacements,
                      anonymised: dict[str, torch.Tensor], config: Config) -> tuple[pd.DataFrame, dict]:
    """Identity and disease of every kind of test image, decided by the independent :class:`Judges`.

    Rows (``images``): the originals, the reconstruction (strength 0: the control of every privacy claim), the
    identity and the medical replacement, and each anonymisation strategy. Columns: ``identity_original`` (the
    image is recognised as its original patient), ``identity_target`` (as the target patient; replacements
    only), ``overall`` (someone in the training data is recognised in it), ``disease`` (the disease classifier
    reads the expected class: the original's, the target's after medical replacement), each with a
    patient-bootstrap ``*_se``; ``n_test``. Chest identity compares with another original image of the patient in
    question, in every row alike.

    Returns:
        ``(table, per_image)``: ``per_image[label]`` holds the ``(N,)`` arrays of each column (for paired claims).
    """
    identity, disease, patients = arrays.identity["test"], arrays.disease["test"], arrays.patients["test"]
    test = arrays.images["test"]
    target, same = replaced.target, replaced.same
    partner_original, partner_target = test[same], test[same[target]]
    # A patient with a single test image has no partner: such pairs are no measurement.
    own_partner = same != np.arange(len(same))
    kinds = {"original images": (test, None), "reconstruction (strength 0)": (replaced.generated[EXPERIMENTS[0]][0],
                                                                             None),
             "identity replacement": (replaced.generated[EXPERIMENTS[2]][0], target),
             "medical replacement": (replaced.generated[EXPERIMENTS[1]][0], target),
             **{f"anonymised: {label}": (images, None) for label, images in anonymised.items()}}
    rows, per_image = [], {}
    for label, (images, targets) in kinds.items():
        shown = images if isinstance(images, np.ndarray) else to_uint8(images)
        values = {"identity_original": judges.identity_hits(shown, identity, partner_original),
                  "identity_target": (judges.identity_hits(shown, identity[targets], partner_target)
                                      if targets is not None else np.full(len(shown), np.nan)),
                  "overall": judges.overall_hits(shown),
                  "disease": judges.disease_hits(shown, disease[target] if label == "medical replacement"
                                                 else disease)}
        if judges.siamese:
            values["identity_original"][~own_partner] = np.nan
            if targets is not None:
                values["identity_target"][~own_partner[target]] = np.nan
        row = {"cohort": arrays.key, "images": label, "n_test": len(shown)}
        for name, array in values.items():
            finite = np.isfinite(array)
            row[name], row[f"{name}_se"] = (_mean_se(array[finite], patients[finite], config,
                                                     f"{arrays.key}-{label}-{name}") if finite.any()
                                            else (float("nan"), float("nan")))
        rows.append(row)
        per_image[label] = values
    return pd.DataFrame(rows), per_image


def explanation_privacy(model: DisentangleModel, vae: IdentityVAE, judges: Judges, adaptive: torch.nn.Module,
                        arrays: DatasetArrays, config: Config) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The privacy / explanation-quality curve of one cohort (one row per strength in ``config.privacy_levels``,
    plus ``strength = NaN`` for the unprocessed training case).

    Columns: ``rank1`` (the attacker's nearest original training image, the case's own image excluded, shows the
    case's identity), ``rank1_adaptive`` (the same for the adaptive attacker, trained on originals and
    reconstructions), ``verification_tar`` (share of the case's other original images the attacker accepts as the
    same identity at the judges' threshold), ``explanation_disease`` (the independent disease classifier reads the
    query's disease in the shown explanation), ``retrieval_agreement`` (the retrieved case's label is the query's;
    independent of the strength), each with a patient-bootstrap SE over queries.

    Returns:
        ``(curve, extra)``; ``extra``: ``examples``, ``threshold``, ``chance_rank1``, ``query_rank1`` and
        ``per_image`` (strength, or ``"case"`` for the unprocessed case -> ``(N,)`` arrays ``rank1`` and
        ``rank1_adaptive``).
    """
    model = model.cpu().eval()
    train_images = arrays.images["train"]
    train_vectors = Encoded.of(model, image_tensor(train_images))
    queries = Encoded.of(model, image_tensor(arrays.images["test"]))
    case = nearest_cases(queries.medical, train_vectors.medical, k=1)[:, 0]
    query_disease, patients = arrays.disease["test"], arrays.patients["test"]
    case_identity = arrays.identity["train"][case]
    retrieval = arrays.disease["train"][case] == query_disease
    adaptive_gallery = _embed(adaptive, train_images)
    replacement = new_identities(len(case), "vae", seed=derive_seed(config.seed, "explanations", arrays.key), vae=vae)
    rows, shown, per_image = [], {}, {}
    versions: list[tuple[float, np.ndarray]] = [(float("nan"), train_images[case])]
    for strength in config.privacy_levels:
        shown_case = anonymise(model, train_vectors.medical[case], train_vectors.identity[case],
                               train_vectors.other[case], replacement, strength)[0]
        versions.append((strength, to_uint8(shown_case)))
    same_gallery = arrays.identity["train"][None, :] == case_identity[:, None]
    same_gallery[np.arange(len(case)), case] = False

    def rank1(embeddings: np.ndarray, gallery: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        similarity = cross_pair_scores(embeddings, gallery, kind="cosine")
        similarity[np.arange(len(case)), case] = -np.inf  # the case's own image is not in the attacker's gallery
        return (arrays.identity["train"][similarity.argmax(1)] == case_identity).astype(float), similarity

    for strength, explanation in versions:
        hit, similarity = rank1(_embed(judges.attacker, explanation), judges.gallery)
        adaptive_hit, _ = rank1(_embed(adaptive, explanation), adaptive_gallery)
        accepted = np.array([np.mean(row[mask] >= judges.threshold) if mask.any() and np.isfinite(judges.threshold)
                             else np.nan for row, mask in zip(similarity, same_gallery)])
        agrees = judges.disease_hits(explanation, query_disease)
        tag = f"{arrays.key}-{strength}"
        row = {"cohort": arrays.key, "strength": strength, "n_test": len(case)}
        row["rank1"], row["rank1_se"] = _mean_se(hit, patients, config, tag + "r")
        row["rank1_adaptive"], row["rank1_adaptive_se"] = _mean_se(adaptive_hit, patients, config, tag + "ra")
        finite = np.isfinite(accepted)
        row["verification_tar"], row["verification_tar_se"] = (
            _mean_se(accepted[finite], patients[finite], config, tag + "v") if finite.any() else (np.nan, np.nan))
        row["explanation_disease"], row["explanation_disease_se"] = _mean_se(agrees, patients, config, tag + "d")
        row["retrieval_agreement"] = float(retrieval.mean())
        rows.append(row)
        per_image["case" if np.isnan(strength) else strength] = {"rank1": hit, "rank1_adaptive": adaptive_hit}
        shown["original case" if np.isnan(strength) else f"strength {strength:g}"] = explanation[:3]
    shown["query"] = arrays.images["test"][:3]
    chance = float(np.mean([np.mean(arrays.identity["train"] == value) for value in case_identity]))
    held_out = _embed(judges.attacker, arrays.images["test"])
    return pd.DataFrame(rows), {"examples": shown, "threshold": judges.threshold, "chance_rank1": chance,
                                "per_image": per_image,
                                "query_rank1": reidentification_accuracy(
                                    held_out, arrays.identity["test"], judges.gallery,
                                    arrays.identity["train"]) if arrays.key == "iris" else float("nan")}


# ---------------------------------------------------------------------------------------------------------------
# the whole experiment
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What :func:`run_experiment` returns (fractions in [0, 1]; ``*_se`` = patient-bootstrap standard errors).

    Attributes:
        table2: Disentanglement rows (cohort, experiment, ssim_original, ssim_x2, identity_original,
            identity_target, disease_accuracy, disease_f1, n_test).
        table3: Anonymisation rows (cohort, method, original_accuracy, overall, disease_accuracy, n_test).
        table4: Realism-loss ablation rows on iris (variant, ssim_original, ...).
        table5: Training-set-size rows on chest (fraction, train_images, ssim_original, identity_original,
            disease_accuracy).
        privacy: Explanation privacy / quality rows (cohort, strength, rank1, verification_tar,
            explanation_disease, retrieval_agreement).
        privacy_info: Cohort -> {"threshold", "chance_rank1", "query_rank1"}.
        cohort_info: Cohort -> {"num_identities", "majority"} (identity classes; majority-class rate of the test
            set's disease labels), for the instrument checks of the claims.
        recognition: Identity and disease of every kind of test image decided by the independent judges
            (:func:`independent_recognition`; cohort, images, identity_original, identity_target, overall, disease, each
            with ``*_se``, n_test): what the claims rest on.
        instruments: One row per instrument check (cohort, instrument, measure, value, floor).
        per_image: ``(cohort, images label)`` -> the ``(N,)`` arrays of :func:`independent_recognition`, and
            ``(cohort, "explanation", strength or "case")`` -> those of :func:`explanation_privacy` (paired claims).
        patients: Cohort -> ``(N,)`` patient ids of the test images (the bootstrap clusters).
        replicates: With ``JUDGE_SEEDS > 1``, one outcome per judge seed, each with that seed's judged tables
            (``recognition``, ``privacy``, ``privacy_info``, ``instruments``, ``per_image``, ``explanations``): the
            claims are decided on each and combined. The outcome itself then holds those tables averaged over the
            seeds (``*_se`` with the seed spread, ``*_seed_sd``; instruments with ``seed_sd`` and ``seeds``) and the
            first seed's examples. Empty with one judge seed.
        examples: Cohort -> label -> uint8 images (N, H, W).
        explanations: Cohort -> label -> uint8 images (the query, the case and its anonymised versions).
        training: One row per network (network, cached, best_epoch, seconds).
        histories: Network -> training history.
        config: The configuration.
        seconds: Wall-clock seconds.
    """

    table2: pd.DataFrame
    table3: pd.DataFrame
    table4: pd.DataFrame
    table5: pd.DataFrame
    privacy: pd.DataFrame
    privacy_info: dict[str, dict[str, float]]
    cohort_info: dict[str, dict[str, float]]
    examples: dict[str, dict[str, np.ndarray]]
    explanations: dict[str, dict[str, np.ndarray]]
    training: pd.DataFrame
    config: Config
    seconds: float = 0.0
    histories: dict[str, pd.DataFrame] = field(default_factory=dict)
    recognition: pd.DataFrame = field(default_factory=pd.DataFrame)
    instruments: pd.DataFrame = field(default_factory=pd.DataFrame)
    per_image: dict = field(default_factory=dict)
    patients: dict[str, np.ndarray] = field(default_factory=dict)
    replicates: list["Outcome"] = field(default_factory=list)


def run_experiment(data: dict[str, DatasetArrays], config: Config, device: torch.device | str | None = None,
                   progress: bool = False, log: Callable[[str], None] = print) -> Outcome:
    """Run the chapter's experiments on both cohorts (see the module docstring)."""
    started = time.perf_counter()
    device = device if device is not None else config.device
    device = get_device(device) if not isinstance(device, torch.device) else device
    training, histories = [], {}

    def note(name: str, info: dict) -> None:
        training.append({"network": name, "cached": info["cached"], "best_epoch": info.get("best_epoch"),
                         "seconds": info["seconds"]})
        histories[name] = info["history"]
        how = "cached" if info["cached"] else f"trained in {info['seconds']:.0f} s"
        log(f"{name}: {how}")

    table2, table3, examples = [], [], {}
    # What each replicate of the judges decides: one view of the outcome per judge seed.
    replicates = [{"recognition": [], "checks": [], "per_image": {}, "privacy": [], "explanations": {}, "info": {}}
                  for _ in range(config.judge_seeds)]
    models = {}
    for key in DATASETS:
        arrays = data[key]
        model, network_info = train_network(arrays, config, device=device, progress=progress)
        note(f"{key}: disentanglement network", network_info)
        models[key] = model
        vaes = {}
        for privacy_term in (True, False):
            vae, vae_info = train_vae(model, arrays, config, privacy_term, device=device, progress=progress)
            note(f"{key}: identity VAE ({'privacy' if privacy_term else 'plain'})", vae_info)
            vaes["privacy" if privacy_term else "plain"] = vae
        replaced = replacements(model, arrays, config)
        rows, shown = disentanglement_table(model, arrays, config, replaced)
        table2.append(rows)
        rows3, shown3, anonymised = anonymisation_table(model, vaes, arrays, config, replaced)
        table3.append(rows3)
        examples[key] = {**shown, **{f"anonymised: {label}": images for label, images in shown3.items()}}
        reconstructed_train = to_uint8(decode_vectors(model, *encode_all(model, image_tensor(arrays.images["train"]))))
        reconstructed_val = to_uint8(decode_vectors(model, *encode_all(model, image_tensor(arrays.images["val"]))))
        decoder = decoder_checks(replaced)
        measure = ATTACKER_AUC if arrays.siamese else ATTACKER_RANK1
        floor = config.attacker_min_auc if arrays.siamese else config.attacker_min_rank1
        # The independent judges: networks trained on the original images (and the adaptive attacker, also on the
        # network's reconstructions of them), JUDGE_SEEDS times with different seeds so that the claims carry
        # their training randomness.
        for replicate, judged in enumerate(replicates):
            suffix = f" (judge seed {replicate + 1})" if replicate else ""
            attacker, attacker_info = train_attacker(arrays, config, device=device, progress=progress,
                                                     replicate=replicate)
            note(f"{key}: re-identification attacker{suffix}", attacker_info)
            disease, disease_info = train_disease_classifier(arrays, config, device=device, progress=progress,
                                                             replicate=replicate)
            note(f"{key}: disease classifier{suffix}", disease_info)
            adaptive, adaptive_info = train_attacker(arrays, config, device=device, progress=progress,
                                                     reconstructions=reconstructed_train, replicate=replicate)
            note(f"{key}: adaptive attacker (originals and reconstructions){suffix}", adaptive_info)
            judges = Judges(attacker, disease, _embed(attacker, arrays.images["train"]), arrays.identity["train"],
                            verification_threshold(attacker, arrays), arrays.siamese)
            judged["checks"] += [
                {"cohort": key, "instrument": "attacker (original images)", "measure": measure,
                 "value": attacker_check(attacker, arrays, arrays.images["val"]), "floor": floor},
                {"cohort": key, "instrument": "adaptive attacker (originals and reconstructions)",
                 "measure": f"{measure}, on reconstructed validation images",
                 "value": attacker_check(adaptive, arrays, reconstructed_val), "floor": floor},
                {"cohort": key, "instrument": "disease classifier (original images)", "measure": DISEASE_AUC,
                 "value": disease_check(disease, arrays), "floor": config.disease_min_auc},
                {"cohort": key, "instrument": "decoder", "measure": DECODER_SPREAD, "value": decoder["spread"],
                 "floor": config.decoder_min_spread},
                {"cohort": key, "instrument": "decoder", "measure": DECODER_RETRIEVAL,
                 "value": decoder["retrieval"], "floor": config.decoder_min_retrieval}]
            rows_r, arrays_r = independent_recognition(judges, arrays, replaced, anonymised, config)
            judged["recognition"].append(rows_r)
            judged["per_image"].update({(key, label): values for label, values in arrays_r.items()})
            curve, extra = explanation_privacy(model, vaes["privacy"], judges, adaptive, arrays, config)
            judged["privacy"].append(curve)
            judged["explanations"][key] = extra.pop("examples")
            judged["per_image"].update({(key, "explanation", strength): values
                                        for strength, values in extra.pop("per_image").items()})
            judged["info"][key] = extra
        log(f"{key}: reconstruction SSIM {rows['ssim_original'].iloc[0]:.3f}, output spread {decoder['spread']:.2f} "
            f"of the originals', {decoder['retrieval']:.0%} of reconstructions nearest their own input")

    # Table 4: realism-loss ablation (iris), every variant at ABLATION_EPOCHS.
    rows4 = []
    for variant in ABLATIONS:
        model, network_info = train_network(data["iris"], config, variant=variant, epochs=config.ablation_epochs,
                                            device=device, progress=progress)
        note(f"iris ablation: {variant}", network_info)
        rows4.append({"variant": variant, **reconstruction_scores(model, data["iris"], config)})
    # Table 5: training-set size (chest).
    rows5 = []
    for fraction in (config.size_fraction, 1.0):
        if fraction == 1.0:
            model = models["cxr"]
        else:
            model, network_info = train_network(data["cxr"], config, fraction=fraction, device=device,
                                                progress=progress)
            note(f"cxr: network on {fraction:g} of the training patients", network_info)
        images = len(data["cxr"].split("train", fraction, derive_seed(config.seed, "fraction"))["images"])
        rows5.append({"fraction": fraction, "train_images": images,
                      **reconstruction_scores(model, data["cxr"], config)})
    views = [Outcome(table2=pd.concat(table2, ignore_index=True), table3=pd.concat(table3, ignore_index=True),
                     table4=pd.DataFrame(rows4), table5=pd.DataFrame(rows5),
                     privacy=pd.concat(judged["privacy"], ignore_index=True), privacy_info=judged["info"],
                     cohort_info={key: {"num_identities": data[key].num_identities,
                                        "majority": float(max(np.mean(data[key].disease["test"]),
                                                              1 - np.mean(data[key].disease["test"])))}
                                  for key in DATASETS}, examples=examples,
                     explanations=judged["explanations"], training=pd.DataFrame(training), config=config,
                     seconds=time.perf_counter() - started, histories=histories,
                     recognition=pd.concat(judged["recognition"], ignore_index=True),
                     instruments=pd.DataFrame(judged["checks"]), per_image=judged["per_image"],
                     patients={key: data[key].patients["test"] for key in DATASETS}) for judged in replicates]
    if len(views) == 1:
        return views[0]
    # The outcome shown: the first replicate's examples, the judged tables averaged over the replicates (SEs with
    # the seed spread); the claims are decided on every replicate's own view and combined.
    return replace(views[0], recognition=combine_replicate_tables([view.recognition for view in views],
                                                                  ["cohort", "images"]),
                   privacy=combine_replicate_tables([view.privacy for view in views], ["cohort", "strength"]),
                   instruments=combine_replicate_tables([view.instruments for view in views],
                                                        ["cohort", "instrument", "measure"]),
                   replicates=views)
