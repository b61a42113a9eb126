"""Anonymisation and case-based explanations with a trained disentanglement model (Montenegro & Cardoso).

An image is anonymised by replacing its identity vector and keeping its medical and "other" vectors:

- ``"vae"``: a new identity decoded from z ~ N(0, I) by the identity VAE (the paper's method; with or without its
  privacy term, depending on how the VAE was trained);
- ``"average-K"``: the mean identity vector of K training identities drawn at random (the K-Same-like baseline);
  ``"average-all"``: of every training identity.

:func:`blend_identities` moves an identity part of the way towards the new one (``strength`` 0 keeps the
original, 1 replaces it): the privacy level of the explanation-quality curve. :func:`nearest_cases` retrieves the
training cases closest to a query by the medical vector (the case-based explanation).

Vectors are float tensors ``(N, D)``; images uint8 ``(N, H, W)``. The networks come from
:mod:`anonpaper.models.disentangle`.
"""

from __future__ import annotations

import numpy as np
import torch

from anonpaper.models.disentangle import DisentangleModel, IdentityVAE


def identity_means(identity_vectors: torch.Tensor, identities: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
    """(identity codes, per-identity mean vectors ``(K, D)``) of training identity vectors ``(N, D)``."""
    identities = np.asarray(identities)
    if identity_vectors.ndim != 2 or identities.shape != (identity_vectors.shape[0],):
        raise ValueError(f"expected vectors (N, D) and identities (N,), got {tuple(identity_vectors.shape)} and "
                         f"{identities.shape}")
    codes = np.unique(identities)
    means = torch.stack([identity_vectors[torch.as_tensor(identities == code)].mean(dim=0) for code in codes])
    return codes, means


def parse_strategy(strategy: str) -> tuple[str, int | None]:
    """``"vae"`` -> ("vae", None); ``"average-6"`` -> ("average", 6); ``"average-all"`` -> ("average", None)."""
    if strategy == "vae":
        return "vae", None
    if strategy.startswith("average-"):
        count = strategy.split("-", 1)[1]
        if count == "all":
            return "average", None
        if count.isdigit() and int(count) >= 1:
            return "average", int(count)
    raise ValueError(f"strategy must be 'vae', 'average-K' (K >= 1) or 'average-all', got {strategy!r}")


def new_identities(count: int, strategy: str, *, seed: int, vae: IdentityVAE | None = None,
                   training_means: torch.Tensor | None = None) -> torch.Tensor:
    """``count`` replacement identity vectors ``(count, D)``.

    Args:
        count: How many (one per image to anonymise).
        strategy: See :func:`parse_strategy`.
        seed: Seed of the draws (latent codes, or which identities are averaged).
        vae: The identity VAE (``"vae"``); its decoder is used in eval mode.
        training_means: Per-identity mean training vectors ``(K, D)`` (``"average-*"``).
    """
    kind, k = parse_strategy(strategy)
    generator = torch.Generator().manual_seed(int(seed))
    if kind == "vae":
        if vae is None:
            raise ValueError("strategy 'vae' needs the identity VAE")
        was_training = vae.training
        vae.eval()
        with torch.no_grad():
            sampled = vae.sample(count, generator).cpu()
        vae.train(was_training)
        return sampled
    if training_means is None or training_means.ndim != 2 or len(training_means) < 1:
        raise ValueError("averaging strategies need the per-identity training means (K, D)")
    available = len(training_means)
    if k is None or k >= available:
        return training_means.mean(dim=0, keepdim=True).repeat(count, 1)
    rows = []
    for _ in range(count):
        chosen = torch.randperm(available, generator=generator)[:k]
        rows.append(training_means[chosen].mean(dim=0))
    return torch.stack(rows)


def blend_identities(original: torch.Tensor, replacement: torch.Tensor, strength: float) -> torch.Tensor:
    """``(1 - strength) * original + strength * replacement``; ``strength`` in [0, 1] (1 = full anonymisation)."""
    if not 0.0 <= float(strength) <= 1.0:
        raise ValueError(f"strength must lie in [0, 1], got {strength}")
    if original.shape != replacement.shape:
        raise ValueError(f"original and replacement differ in shape: {tuple(original.shape)} vs "
                         f"{tuple(replacement.shape)}")
    return (1.0 - strength) * original + strength * replacement


def nearest_cases(query: torch.Tensor, pool: torch.Tensor, k: int = 1) -> np.ndarray:
    """Indices ``(Q, k)`` of the ``k`` pool vectors nearest (Euclidean) to each query vector (ties: lower index)."""
    if query.ndim != 2 or pool.ndim != 2 or query.shape[1] != pool.shape[1]:
        raise ValueError(f"expected query (Q, D) and pool (P, D), got {tuple(query.shape)} and {tuple(pool.shape)}")
    if not 1 <= k <= len(pool):
        raise ValueError(f"k must lie in 1..{len(pool)}, got {k}")
    distance = torch.cdist(query.double(), pool.double()).numpy()
    return np.argsort(distance, axis=1, kind="stable")[:, :k]


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """Decoder output ``(N, 1, H, W)`` in ``[-1, 1]`` -> uint8 ``(N, H, W)`` (channels last when C > 1)."""
    array = ((images.detach().cpu().clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8).numpy()
    return array[:, 0] if array.shape[1] == 1 else array.transpose(0, 2, 3, 1)


def decode_vectors(model: DisentangleModel, medical: torch.Tensor, identity: torch.Tensor, other: torch.Tensor,
                   batch_size: int = 64) -> torch.Tensor:
    """Decode vectors in eval mode (no training noise), batched; float ``(N, C, H, W)`` in ``[-1, 1]`` on the CPU."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, len(medical), batch_size):
            parts = (v[start:start + batch_size].to(device) for v in (medical, identity, other))
            outputs.append(model.decode(*parts).float().cpu())
    model.train(was_training)
    return torch.cat(outputs)


def anonymise(model: DisentangleModel, medical: torch.Tensor, identity: torch.Tensor, other: torch.Tensor,
              replacement: torch.Tensor, strength: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode the medical and other vectors with the identity moved towards ``replacement`` by ``strength``.

    Args:
        model: The disentanglement network.
        medical, identity, other: The images' vectors ``(N, D_k)`` (from the encoder).
        replacement: New identity vectors ``(N, D_id)`` (:func:`new_identities`).
        strength: 1 = the paper's anonymisation (the identity replaced), 0 = a plain reconstruction.

    Returns:
        (images ``(N, C, H, W)`` in ``[-1, 1]``, the identity vectors that were decoded); the medical and other
        vectors are decoded unchanged.
    """
    new_identity = blend_identities(identity, replacement, strength)
    return decode_vectors(model, medical, new_identity, other), new_identity
