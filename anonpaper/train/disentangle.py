"""Losses and training of the disentanglement model (Montenegro & Cardoso, Eq. 1-4 and 6) and its identity VAE
(Eq. 5 and 7).

Disentanglement network (:func:`train_disentangler`), one step:

1. originals ``I_ori``, targets ``I_tar`` (another identity and, where the data allow, another disease) and, in
   the Siamese setting, ``I_same`` (another image of the original's identity);
2. classification loss (Eq. 2; Siamese Eq. 6): ``lambda_med CE(C_med(E_med)) + lambda_id CE(C_id(E_id))``, or
   ``lambda_med CE + lambda_id d(E_id(I_ori), E_id(I_same)) + max(0, margin - d(E_id(I_ori), E_id(I_tar)))``
   with ``d`` the squared Euclidean distance of the vectors (Eq. 6 puts ``lambda_id`` on the first distance only);
3. realism loss (Eq. 3) on the reconstruction ``D(E(I_ori))``: ``-log C_real(aug(rec)) + (1 - SSIM) +
   (1 - PSNR / alpha)`` (each term can be switched off for the ablation of Table 4; ``aug`` = random flips,
   brightness +-0.5 and a random crop, also switchable);
4. disentanglement loss (Eq. 1): for each replaced vector ``i`` in (medical, identity), decode ``I_gen`` with
   ``E_i(I_tar)`` in place of ``E_i(I_ori)``, re-encode it, and penalise ``(E_i(I_tar) - E_i(I_gen))^2`` and
   ``(E_j(I_ori) - E_j(I_gen))^2`` for the kept vectors (squared Euclidean distances, the norm of Eq. 6);
5. total (Eq. 4): ``L_class + lambda_r L_realism + lambda_d L_disent``; the discriminator is trained in the same
   step on augmented real and reconstructed images (binary cross-entropy), with its own Adam optimiser.

Images are float ``(N, C, H, W)`` in ``[-1, 1]`` (the authors' convention); SSIM and PSNR are computed on
``(x + 1) / 2`` in ``[0, 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.methods.disentangle import decode_vectors
from anonpaper.metrics.quality import ssim
from anonpaper.models.disentangle import VECTORS, DisentangleModel, IdentityVAE
from anonpaper.train.loop import TrainResult, TrainSettings, batched_forward, fit, model_device

REALISM_TERMS = ("adversarial", "ssim", "psnr")
SIAMESE_MARGIN = 0.1  # Eq. 6 and 7
SIAMESE_THRESHOLD = 0.05  # same identity when the distance is below it (the paper's t)


@dataclass(frozen=True)
class LossWeights:
    """The weights of Eq. 2-4 and the realism options.

    Attributes:
        medical: lambda_med.
        identity: lambda_id.
        realism: lambda_r.
        disentangle: lambda_d.
        alpha: PSNR normaliser of Eq. 3 (dB; the paper: 48).
        realism_terms: Which of ``REALISM_TERMS`` enter the realism loss.
        augment: Augment the images the discriminator sees.
        both_swaps: Replace both the medical and the identity vector in every step (Eq. 1's sum); False replaces
            one, drawn at random, with its term doubled (the same expected loss at lower cost).
    """

    medical: float = 1.0
    identity: float = 1.0
    realism: float = 0.1
    disentangle: float = 5.0
    alpha: float = 48.0
    realism_terms: tuple[str, ...] = REALISM_TERMS
    augment: bool = True
    both_swaps: bool = True

    def __post_init__(self) -> None:
        unknown = set(self.realism_terms) - set(REALISM_TERMS)
        if unknown or not self.realism_terms:
            raise ValueError(f"realism_terms must be a non-empty subset of {REALISM_TERMS}, got {self.realism_terms!r}")
        if self.alpha <= 0:
            raise ValueError(f"alpha must be positive, got {self.alpha}")


# ---------------------------------------------------------------------------------------------------------------
# losses
# ---------------------------------------------------------------------------------------------------------------
def to_unit(images: torch.Tensor) -> torch.Tensor:
    """Images from ``[-1, 1]`` to ``[0, 1]`` (clamped against rounding)."""
    return ((images + 1.0) / 2.0).clamp(0.0, 1.0)


def differentiable_psnr(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR in dB of images in ``[0, 1]`` (data range 1), with gradients; MSE floored at 1e-10."""
    error = (first - second).pow(2).flatten(1).mean(dim=1).clamp_min(1e-10)
    return 10.0 * torch.log10(1.0 / error)


def realism_loss(real: torch.Tensor, fake: torch.Tensor, fake_logits: torch.Tensor | None, alpha: float = 48.0,
                 terms: tuple[str, ...] = REALISM_TERMS) -> torch.Tensor:
    """Eq. 3: ``-log C_real(fake) + (1 - SSIM(real, fake)) + (1 - min(PSNR(real, fake), alpha) / alpha)``, batch
    mean (PSNR is capped at the threshold ``alpha``, so a near-perfect reconstruction cannot drive the term negative).

    Args:
        real: Originals ``(N, C, H, W)`` in ``[-1, 1]``.
        fake: Reconstructions, same shape.
        fake_logits: Discriminator logits ``(N,)`` of the (augmented) reconstructions; needed when
            ``"adversarial"`` is among ``terms``. ``-log sigmoid(logit)`` is computed as ``softplus(-logit)``.
        alpha: PSNR normaliser in dB.
        terms: The terms to include.
    """
    if real.shape != fake.shape:
        raise ValueError(f"real and fake must have one shape, got {tuple(real.shape)} and {tuple(fake.shape)}")
    total = real.new_zeros(())
    if "adversarial" in terms:
        if fake_logits is None:
            raise ValueError("the adversarial term needs the discriminator's logits")
        total = total + F.softplus(-fake_logits).mean()
    if "ssim" in terms:
        total = total + (1.0 - ssim(to_unit(fake), to_unit(real), reduction="none")).mean()
    if "psnr" in terms:
        # alpha is the paper's "threshold": PSNR above it earns nothing more, so the term stays in [0, 1].
        total = total + (1.0 - differentiable_psnr(to_unit(fake), to_unit(real)).clamp(max=alpha) / alpha).mean()
    return total


def squared_distance(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distance of vectors, per row (sum over entries): ``(N, D), (N, D) -> (N,)``.

    The one norm of every vector term: the paper writes the disentanglement loss (Eq. 1), the Siamese loss (Eq. 6)
    and the privacy hinge (Eq. 7) alike as ``(a - b)^2`` of feature vectors, and its margin 0.1 and same-identity
    threshold t = 0.05 are distances of this kind. (A mean over entries made those margins unreachable for small
    vectors, and put Eq. 1 on a scale D times smaller than Eq. 6.)

    Example:
        >>> squared_distance(torch.tensor([[1.0, 2.0]]), torch.zeros(1, 2)).tolist()
        [5.0]
    """
    return (first - second).pow(2).sum(dim=1)


def disentanglement_loss(generated: tuple[torch.Tensor, ...], original: tuple[torch.Tensor, ...],
                         target: tuple[torch.Tensor, ...], replaced: int) -> torch.Tensor:
    """Eq. 1 for one replaced vector: the generated image's vector ``replaced`` should equal the target's, the
    others the original's (each a batch mean of :func:`squared_distance`, the norm of the Siamese terms)."""
    if not 0 <= replaced < len(generated) or not len(generated) == len(original) == len(target):
        raise ValueError(f"replaced must index the {len(generated)} vectors, got {replaced}")
    loss = squared_distance(generated[replaced], target[replaced]).mean()
    for index in range(len(generated)):
        if index != replaced:
            loss = loss + squared_distance(generated[index], original[index]).mean()
    return loss


def siamese_identity_loss(identity: torch.Tensor, same: torch.Tensor, other: torch.Tensor, weight: float,
                          margin: float = SIAMESE_MARGIN) -> torch.Tensor:
    """The identity part of Eq. 6: ``weight * d(I_ori, I_same) + max(0, margin - d(I_ori, I_tar))``."""
    return (weight * squared_distance(identity, same) + F.relu(margin - squared_distance(identity, other))).mean()


def negative_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Batch mean of ``sum_k p_k log p_k`` (minimising it maximises the classifier's entropy; Eq. 5)."""
    log_p = F.log_softmax(logits, dim=1)
    return (log_p.exp() * log_p).sum(dim=1).mean()


def vae_loss(identity: torch.Tensor, reconstruction: torch.Tensor, mean: torch.Tensor,
             log_variance: torch.Tensor) -> torch.Tensor:
    """Reconstruction (sum of squares per vector) plus KL(q(z|x) || N(0, I)), batch means."""
    rec = (identity - reconstruction).pow(2).sum(dim=1).mean()
    kl = -0.5 * (1.0 + log_variance - mean.pow(2) - log_variance.exp()).sum(dim=1).mean()
    return rec + kl


def hinge_privacy(sampled: torch.Tensor, original: torch.Tensor, other: torch.Tensor,
                  margin: float = SIAMESE_MARGIN) -> torch.Tensor:
    """Eq. 7's privacy terms: ``max(0, m - d(E_id(I), D_vae(X))) + max(0, m - d(E_id(I_2), D_vae(X)))``."""
    return (F.relu(margin - squared_distance(original, sampled))
            + F.relu(margin - squared_distance(other, sampled))).mean()


# ---------------------------------------------------------------------------------------------------------------
# augmentation of the discriminator's inputs
# ---------------------------------------------------------------------------------------------------------------
def augment_for_discriminator(images: torch.Tensor, crop: float = 0.875) -> torch.Tensor:
    """Random horizontal flips, brightness shifts in [-0.5, 0.5] and a random crop resized back (per batch
    position, per image flip and brightness), on images in ``[-1, 1]``; uses PyTorch's global generator (the
    training loop seeds it per epoch)."""
    count, _, height, width = images.shape
    flip = torch.rand(count, device=images.device) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(3), images)
    images = images + (torch.rand(count, 1, 1, 1, device=images.device) - 0.5)
    size_h, size_w = max(1, int(round(height * crop))), max(1, int(round(width * crop)))
    top = int(torch.randint(0, height - size_h + 1, ()).item())
    left = int(torch.randint(0, width - size_w + 1, ()).item())
    images = images[:, :, top:top + size_h, left:left + size_w]
    return F.interpolate(images, size=(height, width), mode="bilinear", align_corners=False).clamp(-1.5, 1.5)


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------
def pair_pools(identities: np.ndarray, diseases: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """For every image, the indices of valid targets (another identity and another disease, or another identity
    when no image has both) and of other images of its identity (itself when it has none)."""
    identities, diseases = np.asarray(identities), np.asarray(diseases)
    if identities.shape != diseases.shape or identities.ndim != 1:
        raise ValueError(f"identities and diseases must be (N,) arrays of one length, got {identities.shape} and "
                         f"{diseases.shape}")
    if len(np.unique(identities)) < 2:
        raise ValueError("the disentanglement loss needs at least two identities")
    targets, same = [], []
    for index in range(len(identities)):
        other_identity = identities != identities[index]
        both = np.flatnonzero(other_identity & (diseases != diseases[index]))
        targets.append(both if len(both) else np.flatnonzero(other_identity))
        mates = np.flatnonzero(identities == identities[index])
        mates = mates[mates != index]
        same.append(mates if len(mates) else np.array([index]))
    return targets, same


def _pick(pools: list[np.ndarray], indices: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    draws = torch.rand(len(indices), generator=generator).numpy()
    return torch.as_tensor([pools[int(i)][int(u * len(pools[int(i)]))] for i, u in zip(indices, draws)])


def image_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 (N, H, W) or (N, H, W, C) -> float (N, C, H, W) in ``[-1, 1]``."""
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim not in (3, 4):
        raise ValueError(f"images must be a uint8 array (N, H, W[, C]), got {getattr(images, 'dtype', type(images))} "
                         f"{getattr(images, 'shape', '')}")
    tensor = torch.from_numpy(np.ascontiguousarray(images[:, None] if images.ndim == 3 else
                                                   images.transpose(0, 3, 1, 2))).float()
    return tensor / 127.5 - 1.0


# ---------------------------------------------------------------------------------------------------------------
# disentanglement network
# ---------------------------------------------------------------------------------------------------------------
def disentangler_step(model: DisentangleModel, batch: tuple, weights: LossWeights,
                      discriminator_optimizer: torch.optim.Optimizer | None) -> tuple[torch.Tensor, dict[str, float]]:
    """One step's generator loss (Eq. 4) and its parts; trains the discriminator first when it is used."""
    originals, diseases, identities, targets, same = batch
    vectors_o = model.encode(originals)
    vectors_t = model.encode(targets)
    parts: dict[str, torch.Tensor] = {}
    # Eq. 2 / Eq. 6.
    classification = weights.medical * F.cross_entropy(model.disease_classifier(vectors_o[0]), diseases)
    if model.siamese:
        classification = classification + siamese_identity_loss(vectors_o[1], model.encode(same)[1], vectors_t[1],
                                                                weights.identity)
    else:
        classification = classification + weights.identity * F.cross_entropy(
            model.identity_classifier(vectors_o[1]), identities)
    parts["classification"] = classification
    # Eq. 3 on the reconstruction.
    reconstruction = model.decode(*vectors_o)
    use_adversarial = "adversarial" in weights.realism_terms
    fake_logits = None
    if use_adversarial:
        prepare = augment_for_discriminator if weights.augment else (lambda x: x)
        if discriminator_optimizer is not None:
            discriminator_optimizer.zero_grad(set_to_none=True)
            real_logits = model.discriminator(prepare(originals))
            detached_logits = model.discriminator(prepare(reconstruction.detach()))
            d_loss = (F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
                      + F.binary_cross_entropy_with_logits(detached_logits, torch.zeros_like(detached_logits)))
            d_loss.backward()
            discriminator_optimizer.step()
            parts["discriminator"] = d_loss.detach()
        fake_logits = model.discriminator(prepare(reconstruction))
    parts["realism"] = realism_loss(originals, reconstruction, fake_logits, weights.alpha, weights.realism_terms)
    # Eq. 1 sums over the replaced vectors (medical and identity). On a CPU budget one step replaces one of them,
    # drawn at random, and doubles its term: the same expectation at half the cost of decoding and re-encoding.
    replaceable = (VECTORS.index("medical"), VECTORS.index("identity"))
    chosen = replaceable if weights.both_swaps else (replaceable[int(torch.randint(0, 2, ()).item())],)
    disentangle = originals.new_zeros(())
    for index in chosen:
        mixed = list(vectors_o)
        mixed[index] = vectors_t[index]
        generated = model.encode(model.decode(*mixed))
        disentangle = disentangle + disentanglement_loss(generated, vectors_o, vectors_t, index)
    disentangle = disentangle * (len(replaceable) / len(chosen))
    parts["disentangle"] = disentangle
    total = classification + weights.realism * parts["realism"] + weights.disentangle * disentangle
    return total, {name: float(value.detach()) for name, value in parts.items()}


def train_disentangler(model: DisentangleModel, train: dict[str, Any], val: dict[str, Any], settings: TrainSettings,
                       weights: LossWeights, discriminator_lr: float | None = None) -> TrainResult:
    """Train the disentanglement network; keep the epoch with the best validation score.

    Args:
        model: A fresh (or, for fine-tuning, pre-trained) :class:`DisentangleModel`.
        train: ``{"images": uint8 (N, H, W), "disease": int (N,), "identity": int (N,) codes}``; identity codes
            index the identity classifier in the multi-class setting.
        val: The same for validation.
        settings: Epochs, batch size (default 32), Adam lr (default 2e-4; the paper 2e-5 over thousands of epochs),
            seed, device, progress.
        weights: :class:`LossWeights`.
        discriminator_lr: The discriminator's Adam rate (betas 0.5, 0.999); None: the network's rate. A slower
            discriminator keeps the adversarial term from swamping the reconstruction in short schedules.

    Returns:
        :class:`TrainResult`; ``history`` has the loss parts and ``val_ssim``, ``val_disease_accuracy``,
        ``val_identity_accuracy`` and their mean ``val_score`` (the monitored value).
    """
    settings.refuse("train_disentangler", "lr_schedule", "channels_last")
    settings = settings.with_defaults(batch_size=32, lr=2e-4, weight_decay=0.0)
    for name, split in (("train", train), ("val", val)):
        missing = {"images", "disease", "identity"} - set(split)
        if missing:
            raise ValueError(f"{name} split lacks {sorted(missing)}")
    images = image_tensor(train["images"])
    diseases = torch.as_tensor(np.asarray(train["disease"]), dtype=torch.long)
    identities = torch.as_tensor(np.asarray(train["identity"]), dtype=torch.long)
    if not len(images) == len(diseases) == len(identities):
        raise ValueError(f"train images, disease and identity differ in length: {len(images)}, {len(diseases)}, "
                         f"{len(identities)}")
    if not model.siamese and int(identities.max()) >= model.identity_classifier.net[-1].out_features:
        raise ValueError("identity codes exceed the identity classifier's classes")
    targets, same = pair_pools(identities.numpy(), diseases.numpy())
    batch_size = settings.batch_size
    generator_parameters = [p for name, p in model.named_parameters() if not name.startswith("discriminator.")]
    optimizer = torch.optim.Adam(generator_parameters, lr=settings.lr, weight_decay=settings.weight_decay)
    discriminator_optimizer = (torch.optim.Adam(model.discriminator.parameters(), lr=discriminator_lr or settings.lr,
                                                betas=(0.5, 0.999))
                               if "adversarial" in weights.realism_terms else None)
    running: dict[str, list[float]] = {}

    def batches(epoch: int, generator: torch.Generator):
        order = torch.randperm(len(images), generator=generator)
        for start in range(0, len(order), batch_size):
            index = order[start:start + batch_size]
            if len(index) < 2:
                continue
            target_index, same_index = _pick(targets, index, generator), _pick(same, index, generator)
            yield images[index], diseases[index], identities[index], images[target_index], images[same_index]

    def step(net: DisentangleModel, batch: tuple) -> torch.Tensor:
        loss, parts = disentangler_step(net, batch, weights, discriminator_optimizer)
        for name, value in parts.items():
            running.setdefault(name, []).append(value)
        return loss

    val_images = image_tensor(val["images"])
    val_disease, val_identity = np.asarray(val["disease"]), np.asarray(val["identity"])

    def evaluate(net: DisentangleModel) -> dict[str, float]:
        device = model_device(net)
        scores = evaluate_vectors(net, val_images, val_disease, val_identity, device)
        values = {f"train_{name}": float(np.mean(v)) for name, v in running.items()}
        running.clear()
        values.update({f"val_{name}": value for name, value in scores.items()})
        values["val_score"] = float(np.mean([scores["ssim"], scores["disease_accuracy"], scores["identity_accuracy"]]))
        return values

    return fit(model, batches=batches, step=step, optimizer=optimizer, epochs=settings.epochs, evaluate=evaluate,
               monitor="val_score", mode="max", early_stopping_patience=settings.early_stopping_patience,
               seed=settings.seed, device=settings.device, checkpoint_path=settings.checkpoint_path,
               progress=settings.progress, description="disentangler",
               batches_per_epoch=(len(images) + batch_size - 1) // batch_size)


def encode_all(model: DisentangleModel, images: torch.Tensor, device: torch.device | None = None,
               batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The three vectors of every image (eval mode, no gradients), on the CPU."""
    device = device or model_device(model)
    stacked = batched_forward(model, images, batch_size, device, lambda x: torch.cat(model.encode(x), dim=1))
    return tuple(stacked.split(list(model.encoder.dims), dim=1))  # type: ignore[return-value]


def evaluate_vectors(model: DisentangleModel, images: torch.Tensor, disease: np.ndarray, identity: np.ndarray,
                     device: torch.device) -> dict[str, float]:
    """Validation scores: reconstruction SSIM, disease accuracy of ``C_med`` and identity accuracy (multi-class:
    ``C_id``; Siamese: balanced accuracy of "distance below t" over same / different identity pairs)."""
    medical, ident, other = encode_all(model, images, device)
    reconstruction = decode_vectors(model, medical, ident, other)
    with torch.no_grad():
        ssim_value = float(ssim(to_unit(reconstruction), to_unit(images)))
        disease_prediction = model.disease_classifier(medical.to(device)).argmax(1).cpu().numpy()
        disease_accuracy = float(np.mean(disease_prediction == disease))
        if model.siamese:
            distance = torch.cdist(ident, ident).pow(2).numpy()
            same = identity[:, None] == identity[None, :]
            off_diagonal = ~np.eye(len(identity), dtype=bool)
            hits = distance < SIAMESE_THRESHOLD
            positives, negatives = same & off_diagonal, ~same
            rates = [hits[positives].mean() if positives.any() else np.nan,
                     (~hits[negatives]).mean() if negatives.any() else np.nan]
            identity_accuracy = float(np.nanmean(rates))
        else:
            identity_prediction = model.identity_classifier(ident.to(device)).argmax(1).cpu().numpy()
            identity_accuracy = float(np.mean(identity_prediction == identity))
    return {"ssim": ssim_value, "disease_accuracy": disease_accuracy, "identity_accuracy": identity_accuracy}


# ---------------------------------------------------------------------------------------------------------------
# identity VAE
# ---------------------------------------------------------------------------------------------------------------
def train_identity_vae(vae: IdentityVAE, identity_vectors: torch.Tensor, settings: TrainSettings, *,
                       privacy: str, identity_classifier: nn.Module | None = None,
                       identities: np.ndarray | None = None, privacy_weight: float = 1.0) -> TrainResult:
    """Train the identity VAE on training identity vectors (Eq. 5 or 7).

    Args:
        vae: A fresh :class:`IdentityVAE`.
        identity_vectors: ``(N, D)`` identity vectors of the training images (the encoder's, frozen).
        settings: Epochs, batch size (default 64), Adam lr (default 1e-3), seed, device, progress.
        privacy: ``"none"`` (a plain VAE), ``"entropy"`` (Eq. 5: maximise the entropy of ``identity_classifier``
            on decoded samples) or ``"hinge"`` (Eq. 7: keep samples at least the Siamese margin away from the
            original identity and from a random training identity).
        identity_classifier: ``C_id`` (frozen), for ``"entropy"``.
        identities: ``(N,)`` identity codes, for ``"hinge"`` (the random other identity is another identity's
            vector).
        privacy_weight: Weight of the privacy term (the paper: 1).

    Returns:
        :class:`TrainResult` (monitored: training loss).
    """
    settings.refuse("train_identity_vae", "lr_schedule", "channels_last")
    settings = settings.with_defaults(batch_size=64, lr=1e-3, weight_decay=0.0)
    if privacy not in ("none", "entropy", "hinge"):
        raise ValueError(f"privacy must be 'none', 'entropy' or 'hinge', got {privacy!r}")
    if privacy == "entropy" and identity_classifier is None:
        raise ValueError("privacy='entropy' needs the identity classifier")
    if privacy == "hinge" and identities is None:
        raise ValueError("privacy='hinge' needs the identity codes")
    vectors = identity_vectors.detach().float().cpu()
    if vectors.ndim != 2 or vectors.shape[1] != vae.identity_dim:
        raise ValueError(f"identity_vectors: expected (N, {vae.identity_dim}), got {tuple(vectors.shape)}")
    others = None
    if privacy == "hinge":
        others_pool, _ = pair_pools(np.asarray(identities), np.zeros(len(vectors), dtype=int))
        others = others_pool
    frozen = None
    if identity_classifier is not None:
        frozen = identity_classifier.eval()
        for parameter in frozen.parameters():
            parameter.requires_grad_(False)
    holder = nn.ModuleDict({"vae": vae} if frozen is None else {"vae": vae, "classifier": frozen})
    optimizer = torch.optim.Adam(vae.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    batch_size = settings.batch_size

    def batches(epoch: int, generator: torch.Generator):
        order = torch.randperm(len(vectors), generator=generator)
        for start in range(0, len(order), batch_size):
            index = order[start:start + batch_size]
            if len(index) < 2:
                continue
            other_index = _pick(others, index, generator) if others is not None else index
            yield vectors[index], vectors[other_index], torch.randn(len(index), vae.latent_dim, generator=generator)

    def step(net: nn.ModuleDict, batch: tuple) -> torch.Tensor:
        original, other, latent = batch
        reconstruction, mean, log_variance = net["vae"](original)
        loss = vae_loss(original, reconstruction, mean, log_variance)
        sampled = net["vae"].decode(latent)
        if privacy == "entropy":
            net["classifier"].eval()
            loss = loss + privacy_weight * negative_entropy(net["classifier"](sampled))
        elif privacy == "hinge":
            loss = loss + privacy_weight * hinge_privacy(sampled, original, other)
        return loss

    result = fit(holder, batches=batches, step=step, optimizer=optimizer, epochs=settings.epochs, seed=settings.seed,
                 device=settings.device, progress=settings.progress, description=f"identity VAE ({privacy})")
    result.model = result.model["vae"]
    return result
