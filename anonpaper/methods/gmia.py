"""GMIA anonymisation by latent code optimisation (Li, Ayache and Delingette, ISBI 2025, Sec. 2.2).

Each image ``x`` is projected by the encoder, ``w_A <- E(x)``, and ``w_A`` alone is optimised (every network is
frozen) with Adam on

    ``L = L_id + L_ut``,
    ``L_id = max(0, cos(E_id(x), E_id(G(w_A))) - m)``  (paper Eq. 1),
    ``L_ut = mean((E_ut(x) - E_ut(G(w_A)))^2)``          (paper Eq. 2),

where ``E_id`` is a patient re-identification embedding network, ``E_ut`` the penultimate-layer features of a
pathology classifier, and the margin ``m`` sets how dissimilar the anonymised identity must become: ``L_id`` is zero
(and stops pushing) once the cosine similarity is at most ``m``. The cosine adds ``1e-12`` to each squared norm
(the paper's epsilon against division by zero). The authors' settings: W space (one w repeated to every synthesis
layer), 1000 Adam steps with learning rate 0.01 and betas (0, 0.99), ``m = -0.7``; the paper ablates
``m in {0, -0.5, -0.7}`` and the two losses (``identity_weight`` / ``utility_weight`` set to 0 drop one).

Images are optimised in chunks of ``batch_size``; the loss is the SUM over images of their own losses, so each
image's gradient, and hence (Adam acting per coordinate) its whole trajectory, is the one it would have alone; a
batch only saves time. The networks are put in eval mode (BatchNorm uses running statistics, so images do not
interact) and restored afterwards. ``E_id`` and ``E_ut`` receive images in [0, 1]: the real ones as given, the
generated ones mapped linearly from [-1, 1] *without* clamping, so gradients flow through every pixel (the
returned images are clamped).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from anonpaper.models.stylegan.layers import to_signed_range, to_unit_range

FeatureNetwork = Callable[[torch.Tensor], torch.Tensor]
COSINE_EPSILON = 1e-12


@dataclass(frozen=True)
class LatentOptimizationSettings:
    """Settings of :func:`anonymize` (defaults: the authors' code).

    Attributes:
        steps: Adam steps per image (1000).
        learning_rate: Adam learning rate (0.01).
        betas: Adam betas ((0, 0.99)).
        margin: ``m`` of ``L_id``, in [-1, 1] (-0.7; ablation 0, -0.5, -0.7). Lower = anonymised identity pushed
            further from the original.
        identity_weight: Weight of ``L_id`` (1; 0 = utility loss only).
        utility_weight: Weight of ``L_ut`` (1; 0 = identity loss only).
        space: ``"w"`` (GMIA: optimise one w per image, repeated to every layer; the encoder's rows are averaged,
            which for a W encoder is its w) or ``"w+"`` (one w per layer).
        batch_size: Images optimised together (results do not depend on it beyond float rounding).
        noise_mode: Synthesis noise (``"const"``: the generator's fixed buffers, deterministic).
        progress: Show a tqdm progress bar.
    """

    steps: int = 1000
    learning_rate: float = 0.01
    betas: tuple[float, float] = (0.0, 0.99)
    margin: float = -0.7
    identity_weight: float = 1.0
    utility_weight: float = 1.0
    space: str = "w"
    batch_size: int = 16
    noise_mode: str = "const"
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not (isinstance(self.margin, (int, float)) and -1.0 <= self.margin <= 1.0):
            raise ValueError(f"margin must be a number in [-1, 1], got {self.margin!r}")
        for name in ("learning_rate", "identity_weight", "utility_weight"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if len(self.betas) != 2 or not all(0.0 <= beta < 1.0 for beta in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        if self.space not in ("w", "w+"):
            raise ValueError(f"space must be 'w' or 'w+', got {self.space!r}")
        if self.noise_mode not in ("const", "random", "none"):
            raise ValueError(f"noise_mode must be 'const', 'random' or 'none', got {self.noise_mode!r}")

    def replace(self, **changes) -> "LatentOptimizationSettings":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass
class GMIAResult:
    """Output of :func:`anonymize` (all tensors detached, float32, on the CPU).

    Attributes:
        images: (N, C, R, R) anonymised images ``G(w_A)`` in [0, 1] (clamped).
        ws: (N, num_ws, w_dim) optimised latents ``w_A``.
        initial_ws: (N, num_ws, w_dim) their starting points ``E(x)`` (in the optimised space).
        reconstructions: (N, C, R, R) ``G(E(x))`` in [0, 1] (clamped): the projection before optimisation.
        identity_loss: (N, steps) ``L_id`` of each image at each step (before that step's update).
        utility_loss: (N, steps) ``L_ut``.
        total_loss: (N, steps) ``identity_weight * L_id + utility_weight * L_ut``.
        cosine: (N, steps) identity cosine similarity between ``x`` and ``G(w_A)``.
        final_cosine: (N,) the cosine after the last step (lower = identity further from the original).
        settings: The settings used.
    """

    images: torch.Tensor
    ws: torch.Tensor
    initial_ws: torch.Tensor
    reconstructions: torch.Tensor
    identity_loss: torch.Tensor
    utility_loss: torch.Tensor
    total_loss: torch.Tensor
    cosine: torch.Tensor
    final_cosine: torch.Tensor
    settings: LatentOptimizationSettings


def _flat_features(features: torch.Tensor, count: int, name: str) -> torch.Tensor:
    if not torch.is_tensor(features) or features.ndim < 2 or features.shape[0] != count:
        raise ValueError(f"{name} must return a tensor (N={count}, ...), got "
                         f"{tuple(features.shape) if torch.is_tensor(features) else type(features).__name__}")
    return features.flatten(1).float()


def identity_cosine(real_embeddings: torch.Tensor, anonymised_embeddings: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine similarity with ``1e-12`` added to each squared norm (GMIA Eq. 1).

    Args:
        real_embeddings: (N, D) identity embeddings of the real images (any scale).
        anonymised_embeddings: (N, D) those of the anonymised images (differentiable).

    Returns:
        (N,) values in [-1, 1]; 1 = same direction (same identity to the verifier). Symmetric.
    """
    if real_embeddings.ndim != 2 or real_embeddings.shape != anonymised_embeddings.shape:
        raise ValueError(f"embeddings: expected two (N, D) tensors of one shape, observed "
                         f"{tuple(real_embeddings.shape)} and {tuple(anonymised_embeddings.shape)}")
    dot = (real_embeddings * anonymised_embeddings).sum(dim=1)
    norms = ((real_embeddings.square().sum(dim=1) + COSINE_EPSILON)
             * (anonymised_embeddings.square().sum(dim=1) + COSINE_EPSILON)).sqrt()
    return dot / norms


def identity_loss(real_embeddings: torch.Tensor, anonymised_embeddings: torch.Tensor, margin: float) -> torch.Tensor:
    """GMIA's identity loss ``max(0, cos(e_x, e_A) - m)`` per image.

    Args:
        real_embeddings: (N, D).
        anonymised_embeddings: (N, D), differentiable.
        margin: ``m`` in [-1, 1].

    Returns:
        (N,) non-negative losses; exactly 0 (with zero gradient) where the cosine is at most ``m``; otherwise its
        gradient lowers the cosine.

    Example:
        >>> e = torch.tensor([[1.0, 0.0]])
        >>> float(identity_loss(e, torch.tensor([[0.0, 1.0]]), margin=-0.5))  # orthogonal: cos 0
        0.5
        >>> float(identity_loss(e, -e, margin=-0.5))  # opposite: cos -1 <= m
        0.0
    """
    if not -1.0 <= float(margin) <= 1.0:
        raise ValueError(f"margin must be in [-1, 1], got {margin}")
    return torch.relu(identity_cosine(real_embeddings, anonymised_embeddings) - margin)


def utility_loss(real_features: torch.Tensor, anonymised_features: torch.Tensor) -> torch.Tensor:
    """GMIA's utility loss: mean squared difference of the utility features, per image.

    Args:
        real_features: (N, ...) features of the real images (e.g. a classifier's penultimate layer).
        anonymised_features: Same shape, differentiable.

    Returns:
        (N,) non-negative values; 0 when the features agree.
    """
    if real_features.shape != anonymised_features.shape or real_features.ndim < 2:
        raise ValueError(f"features: expected two (N, ...) tensors of one shape, observed "
                         f"{tuple(real_features.shape)} and {tuple(anonymised_features.shape)}")
    return (real_features - anonymised_features).square().flatten(1).mean(dim=1)


def _check_images(images: torch.Tensor, generator: nn.Module) -> None:
    expected = (generator.image_channels, generator.resolution, generator.resolution)
    if not torch.is_tensor(images) or not images.is_floating_point() or images.ndim != 4 \
            or tuple(images.shape[1:]) != expected or images.shape[0] < 1:
        raise ValueError(f"images must be a float tensor (N, {expected[0]}, {expected[1]}, {expected[2]}), got "
                         f"{getattr(images, 'dtype', type(images).__name__)} {tuple(getattr(images, 'shape', ()))}")
    if not bool(torch.isfinite(images).all()) or float(images.min()) < 0.0 or float(images.max()) > 1.0:
        raise ValueError(f"images must be finite and in [0, 1], got range [{float(images.min()):.3f}, "
                         f"{float(images.max()):.3f}]")


class _Frozen:
    """Context manager: modules in eval mode with ``requires_grad=False``; their flags restored on exit."""

    def __init__(self, *networks):
        self.modules = [network for network in networks if isinstance(network, nn.Module)]
        for network in networks:  # a bound method of a module (e.g. classifier.forward_features)
            owner = getattr(network, "__self__", None)
            if isinstance(owner, nn.Module):
                self.modules.append(owner)

    def __enter__(self):
        self.state = [(module, module.training, [(p, p.requires_grad) for p in module.parameters()])
                      for module in self.modules]
        for module in self.modules:
            module.eval().requires_grad_(False)
        return self

    def __exit__(self, *exc):
        for module, training, flags in reversed(self.state):
            module.train(training)
            for parameter, flag in flags:
                parameter.requires_grad_(flag)


def anonymize(encoder: nn.Module, generator: nn.Module, images: torch.Tensor, identity_network: FeatureNetwork,
              utility_network: FeatureNetwork, settings: LatentOptimizationSettings = LatentOptimizationSettings()
              ) -> GMIAResult:
    """Anonymise images by GMIA latent code optimisation (see the module docstring).

    Args:
        encoder: E: images (N, C, R, R) in [-1, 1] -> (N, num_ws, w_dim) latents (e.g. a trained
            :class:`~anonpaper.models.encoders.LatentEncoder`).
        generator: A trained :class:`~anonpaper.models.stylegan.StyleGenerator` (its ``synthesis`` is used).
        images: (N, C, R, R) float real images in [0, 1], matching the generator. Not modified.
        identity_network: E_id: images in [0, 1] -> (N, D) identity embeddings (e.g. an
            :class:`~anonpaper.models.embedding.EmbeddingNet`).
        utility_network: E_ut: images in [0, 1] -> (N, ...) utility features (e.g. a classifier's
            ``forward_features``: its penultimate layer).
        settings: :class:`LatentOptimizationSettings`.

    Returns:
        :class:`GMIAResult`. The networks' parameters, modes and ``requires_grad`` flags are left as they were.

    Raises:
        ValueError: On images of the wrong shape or range, or networks returning the wrong batch size.
    """
    _check_images(images, generator)
    device = generator.w_avg.device
    steps, count = settings.steps, images.shape[0]
    outputs: dict[str, list[torch.Tensor]] = {key: [] for key in (
        "images", "ws", "initial_ws", "reconstructions", "identity", "utility", "total", "cosine", "final_cosine")}
    progress = None
    if settings.progress:
        from tqdm.auto import tqdm

        progress = tqdm(total=steps * math.ceil(count / settings.batch_size), desc="GMIA latent optimisation",
                        unit="step")

    def synthesize(w: torch.Tensor) -> torch.Tensor:
        ws = w.expand(-1, generator.num_ws, -1) if w.shape[1] == 1 else w
        return generator.synthesis(ws, noise_mode=settings.noise_mode)

    with _Frozen(encoder, generator, identity_network, utility_network):
        for start in range(0, count, settings.batch_size):
            real = images[start:start + settings.batch_size].detach().to(device)
            size = real.shape[0]
            with torch.no_grad():
                initial = encoder(to_signed_range(real))
                if initial.ndim != 3 or initial.shape[0] != size or initial.shape[2] != generator.w_dim:
                    raise ValueError(f"encoder must return (N={size}, num_ws, {generator.w_dim}) latents, got "
                                     f"{tuple(initial.shape)}")
                initial = initial.mean(dim=1, keepdim=True) if settings.space == "w" else initial
                real_identity = _flat_features(identity_network(real), size, "identity_network")
                real_utility = _flat_features(utility_network(real), size, "utility_network")
                reconstruction = synthesize(initial)
            w = initial.clone().contiguous().requires_grad_(True)
            optimizer = torch.optim.Adam([w], lr=settings.learning_rate, betas=settings.betas)
            history = {key: torch.empty(size, steps) for key in ("identity", "utility", "total", "cosine")}
            for step in range(steps):
                fake = to_unit_range(synthesize(w), clamp=False)
                fake_identity = _flat_features(identity_network(fake), size, "identity_network")
                cosine = identity_cosine(real_identity, fake_identity)
                loss_id = torch.relu(cosine - settings.margin)
                loss_ut = utility_loss(real_utility, _flat_features(utility_network(fake), size, "utility_network"))
                per_image = settings.identity_weight * loss_id + settings.utility_weight * loss_ut
                optimizer.zero_grad(set_to_none=True)
                per_image.sum().backward()
                optimizer.step()
                for key, value in (("identity", loss_id), ("utility", loss_ut), ("total", per_image),
                                   ("cosine", cosine)):
                    history[key][:, step] = value.detach().float().cpu()
                if progress is not None:
                    progress.update(1)
                    progress.set_postfix(loss=f"{float(per_image.detach().mean()):.4f}",
                                         cosine=f"{float(cosine.detach().mean()):.3f}")
            with torch.no_grad():
                final = synthesize(w)
                final_cosine = identity_cosine(
                    real_identity, _flat_features(identity_network(to_unit_range(final, clamp=False)), size,
                                                  "identity_network"))
            rows = generator.num_ws
            outputs["images"].append(to_unit_range(final).float().cpu())
            outputs["ws"].append(w.detach().expand(-1, rows, -1).float().cpu())
            outputs["initial_ws"].append(initial.expand(-1, rows, -1).float().cpu())
            outputs["reconstructions"].append(to_unit_range(reconstruction).float().cpu())
            outputs["final_cosine"].append(final_cosine.float().cpu())
            for key, value in history.items():
                outputs[key].append(value)
    if progress is not None:
        progress.close()
    joined = {key: torch.cat(values) for key, values in outputs.items()}
    return GMIAResult(images=joined["images"], ws=joined["ws"], initial_ws=joined["initial_ws"],
                      reconstructions=joined["reconstructions"], identity_loss=joined["identity"],
                      utility_loss=joined["utility"], total_loss=joined["total"], cosine=joined["cosine"],
                      final_cosine=joined["final_cosine"], settings=settings)
