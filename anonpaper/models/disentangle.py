"""Networks of the identity / medical disentanglement model (Montenegro & Cardoso) and its identity VAE.

- :class:`DisentangleEncoder`: residual convolutional encoder -> global average pool -> three dense heads, the
  medical, identity and "other" feature vectors.
- :class:`DisentangleDecoder`: dense layer to an ``(H/16, W/16)`` map, four upsampling residual blocks, ``tanh``
  (images in ``[-1, 1]``).
- :class:`PatchDiscriminator`: residual convolutional real / fake classifier (one logit per image).
- :class:`MLPClassifier`: the disease and the multi-class identity classifiers (one hidden layer, dropout).
- :class:`DisentangleModel`: all of them in one module, with :meth:`DisentangleModel.swap` (replace one vector
  by another image's) and :meth:`DisentangleModel.reconstruct`.
- :class:`IdentityVAE`: MLP encoder and decoder (one hidden layer and dropout each) over identity vectors.

Shapes: images ``(N, C, H, W)`` in ``[-1, 1]`` with ``H = W`` a multiple of 16; vectors ``(N, D)``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

VECTORS = ("medical", "identity", "other")


class _ResidualDown(nn.Module):
    """Two 3x3 convolutions, the first with stride 2, plus a strided 1x1 shortcut (halves the size)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1), nn.BatchNorm2d(out_channels),
            nn.LeakyReLU(0.2), nn.Conv2d(out_channels, out_channels, 3, padding=1), nn.BatchNorm2d(out_channels))
        self.shortcut = nn.Conv2d(in_channels, out_channels, 1, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(self.body(x) + self.shortcut(x), 0.2)


class _ResidualUp(nn.Module):
    """Nearest-neighbour upsampling by 2, then two 3x3 convolutions plus a 1x1 shortcut."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding=1), nn.BatchNorm2d(out_channels), nn.LeakyReLU(0.2),
            nn.Conv2d(out_channels, out_channels, 3, padding=1), nn.BatchNorm2d(out_channels))
        self.shortcut = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        return F.leaky_relu(self.body(x) + self.shortcut(x), 0.2)


def _check_image_batch(images: torch.Tensor, channels: int, size: int) -> None:
    if images.ndim != 4 or images.shape[1] != channels or images.shape[2] != size or images.shape[3] != size:
        raise ValueError(f"expected images (N, {channels}, {size}, {size}), got {tuple(images.shape)}")


class DisentangleEncoder(nn.Module):
    """Images -> (medical, identity, other) vectors.

    Args:
        channels: Image channels (1 for the grayscale iris and chest images).
        image_size: Square image side (a multiple of 16, >= 16).
        width: Channels of the first residual block (doubled per block, at most ``8 * width``).
        dims: Sizes of the medical, identity and other vectors.
    """

    def __init__(self, channels: int, image_size: int, width: int = 32, dims: tuple[int, int, int] = (256, 256, 256)):
        super().__init__()
        if image_size % 16 or image_size < 16:
            raise ValueError(f"image_size must be a multiple of 16 (>= 16), got {image_size}")
        if len(dims) != 3 or any(int(d) < 1 for d in dims):
            raise ValueError(f"dims must be three positive sizes (medical, identity, other), got {dims!r}")
        self.channels, self.image_size, self.dims = channels, image_size, tuple(int(d) for d in dims)
        widths = [width * min(2 ** index, 8) for index in range(4)]
        blocks, previous = [nn.Conv2d(channels, width, 3, padding=1), nn.LeakyReLU(0.2)], width
        for out in widths:
            blocks.append(_ResidualDown(previous, out))
            previous = out
        self.trunk = nn.Sequential(*blocks)
        self.heads = nn.ModuleList(nn.Linear(previous, dim) for dim in self.dims)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _check_image_batch(images, self.channels, self.image_size)
        pooled = self.trunk(images).mean(dim=(2, 3))
        return tuple(head(pooled) for head in self.heads)  # type: ignore[return-value]


class DisentangleDecoder(nn.Module):
    """(medical, identity, other) vectors -> images in ``[-1, 1]``.

    Args:
        channels: Image channels.
        image_size: Square image side (a multiple of 16).
        width: Channels of the last upsampling block (the first has ``8 * width``).
        dims: Sizes of the three vectors (as the encoder's).
    """

    def __init__(self, channels: int, image_size: int, width: int = 32, dims: tuple[int, int, int] = (256, 256, 256)):
        super().__init__()
        if image_size % 16 or image_size < 16:
            raise ValueError(f"image_size must be a multiple of 16 (>= 16), got {image_size}")
        self.dims, self.start = tuple(int(d) for d in dims), image_size // 16
        self.start_channels = 8 * width
        self.dense = nn.Linear(sum(self.dims), self.start_channels * self.start * self.start)
        widths = [8 * width, 4 * width, 2 * width, width]
        blocks, previous = [], self.start_channels
        for out in widths:
            blocks.append(_ResidualUp(previous, out))
            previous = out
        self.blocks = nn.Sequential(*blocks)
        self.out = nn.Conv2d(previous, channels, 3, padding=1)

    def forward(self, medical: torch.Tensor, identity: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        for name, vector, dim in zip(VECTORS, (medical, identity, other), self.dims):
            if vector.ndim != 2 or vector.shape[1] != dim:
                raise ValueError(f"{name} vector: expected (N, {dim}), got {tuple(vector.shape)}")
        x = self.dense(torch.cat([medical, identity, other], dim=1))
        x = F.leaky_relu(x.view(-1, self.start_channels, self.start, self.start), 0.2)
        return torch.tanh(self.out(self.blocks(x)))


class PatchDiscriminator(nn.Module):
    """Residual convolutional discriminator: images in ``[-1, 1]`` -> one real/fake logit per image."""

    def __init__(self, channels: int, image_size: int, width: int = 32):
        super().__init__()
        widths = [width * min(2 ** index, 8) for index in range(4)]
        blocks, previous = [nn.Conv2d(channels, width, 3, padding=1), nn.LeakyReLU(0.2)], width
        for out in widths:
            blocks.append(_ResidualDown(previous, out))
            previous = out
        self.trunk = nn.Sequential(*blocks)
        self.out = nn.Linear(previous, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.out(self.trunk(images).mean(dim=(2, 3))).squeeze(1)


class MLPClassifier(nn.Module):
    """Vector -> logits through one hidden layer with dropout (the paper's disease and identity classifiers)."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 128, dropout: float = 0.3):
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, num_classes))

    def forward(self, vector: torch.Tensor) -> torch.Tensor:
        return self.net(vector)


class DisentangleModel(nn.Module):
    """Encoder, decoder, disease classifier, identity classifier (None for the Siamese setting) and discriminator.

    Args:
        channels, image_size, width, dims: See :class:`DisentangleEncoder`.
        num_diseases: Disease classes (>= 2).
        num_identities: Identity classes of the multi-class identity classifier; None for the Siamese setting
            (identity learnt through distances between identity vectors, no classifier).
        noise: Standard deviation of the Gaussian noise added to the vectors before decoding while training.
    """

    def __init__(self, channels: int, image_size: int, num_diseases: int, num_identities: int | None,
                 width: int = 32, dims: tuple[int, int, int] = (256, 256, 256), noise: float = 0.1):
        super().__init__()
        self.encoder = DisentangleEncoder(channels, image_size, width, dims)
        self.decoder = DisentangleDecoder(channels, image_size, width, dims)
        self.disease_classifier = MLPClassifier(dims[0], num_diseases)
        self.identity_classifier = MLPClassifier(dims[1], num_identities) if num_identities else None
        self.discriminator = PatchDiscriminator(channels, image_size, width)
        self.noise = float(noise)
        self.siamese = num_identities is None

    def encode(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.encoder(images)

    def decode(self, medical: torch.Tensor, identity: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """Decode; while training, Gaussian noise of ``self.noise`` is added to every vector first."""
        if self.training and self.noise > 0:
            medical, identity, other = (v + self.noise * torch.randn_like(v) for v in (medical, identity, other))
        return self.decoder(medical, identity, other)

    def reconstruct(self, images: torch.Tensor) -> torch.Tensor:
        return self.decode(*self.encode(images))

    def swap(self, images: torch.Tensor, targets: torch.Tensor, vector: str) -> torch.Tensor:
        """``images`` with their ``vector`` ("medical", "identity" or "other") replaced by that of ``targets``."""
        if vector not in VECTORS:
            raise ValueError(f"vector must be one of {VECTORS}, got {vector!r}")
        original, target = list(self.encode(images)), self.encode(targets)
        index = VECTORS.index(vector)
        original[index] = target[index]
        return self.decode(*original)


class IdentityVAE(nn.Module):
    """VAE over identity vectors: MLP encoder to (mu, log-variance) and MLP decoder, one hidden layer and dropout.

    Args:
        identity_dim: Size of the identity vectors.
        latent_dim: Size of the latent code (the paper: 16 multi-class, 64 Siamese).
        hidden: Hidden units of both MLPs.
        dropout: Dropout probability of both MLPs.
    """

    def __init__(self, identity_dim: int, latent_dim: int = 16, hidden: int = 256, dropout: float = 0.2):
        super().__init__()
        self.identity_dim, self.latent_dim = int(identity_dim), int(latent_dim)
        self.encoder = nn.Sequential(nn.Linear(identity_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                     nn.Linear(hidden, 2 * latent_dim))
        self.decoder = nn.Sequential(nn.Linear(latent_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                     nn.Linear(hidden, identity_dim))

    def encode(self, identity: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if identity.ndim != 2 or identity.shape[1] != self.identity_dim:
            raise ValueError(f"identity vectors: expected (N, {self.identity_dim}), got {tuple(identity.shape)}")
        mean, log_variance = self.encoder(identity).chunk(2, dim=1)
        return mean, log_variance.clamp(-10.0, 10.0)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        return self.decoder(latent)

    def forward(self, identity: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(reconstruction, mean, log-variance); the latent is sampled by reparameterisation."""
        mean, log_variance = self.encode(identity)
        latent = mean + torch.exp(0.5 * log_variance) * torch.randn_like(mean)
        return self.decode(latent), mean, log_variance

    def sample(self, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``count`` new identity vectors decoded from z ~ N(0, I)."""
        device = next(self.parameters()).device
        latent = torch.randn(count, self.latent_dim, generator=generator).to(device)
        return self.decode(latent)
