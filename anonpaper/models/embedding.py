"""Identity embedding network and ArcFace head for patient re-identification (GMIA's E_id, paper 3).

GMIA uses an iResNet-50 with an ArcFace head (s = 64, m = 0.5). Here the backbone is any classifier of
:mod:`anonpaper.models.classifiers` with its classification layer removed, followed by a linear projection and
L2 normalisation; verification compares squared distances of the unit-length embeddings with a threshold.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from anonpaper.models.classifiers import CLASSIFIER_NAMES, SmallCNN


class EmbeddingNet(nn.Module):
    """Backbone -> linear -> BatchNorm1d -> L2 normalisation.

    Args:
        in_channels: Image channels.
        embedding_dim: Dimension D of the embedding.
        backbone: A name from :data:`anonpaper.models.classifiers.CLASSIFIER_NAMES` (timm ResNet-D family or
            ``"small_cnn"``), randomly initialised.

    Raises:
        ValueError: On an unknown backbone or non-positive sizes.
    """

    def __init__(self, in_channels: int, embedding_dim: int = 128, backbone: str = "resnet18d"):
        super().__init__()
        if backbone not in CLASSIFIER_NAMES:
            raise ValueError(f"unknown backbone {backbone!r}; expected one of {CLASSIFIER_NAMES}")
        if not isinstance(in_channels, int) or in_channels < 1:
            raise ValueError(f"in_channels must be a positive integer, got {in_channels!r}")
        if not isinstance(embedding_dim, int) or embedding_dim < 1:
            raise ValueError(f"embedding_dim must be a positive integer, got {embedding_dim!r}")
        if backbone == "small_cnn":
            self.backbone = SmallCNN(in_channels, 2)
            self.backbone.fc = nn.Identity()
        else:
            import timm

            # num_classes=0 makes timm return the pooled features instead of logits.
            self.backbone = timm.create_model(backbone, pretrained=False, in_chans=in_channels, num_classes=0)
        self.in_channels, self.embedding_dim, self.backbone_name = in_channels, embedding_dim, backbone
        self.projection = nn.Linear(self.backbone.num_features, embedding_dim, bias=False)
        self.bn = nn.BatchNorm1d(embedding_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Unit-length embeddings.

        Args:
            x: Float tensor (N, in_channels, H, W).

        Returns:
            Float tensor (N, embedding_dim) with rows of L2 norm 1.
        """
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"EmbeddingNet expects (N, {self.in_channels}, H, W), got {tuple(x.shape)}")
        return F.normalize(self.bn(self.projection(self.backbone(x))), dim=1, eps=1e-12)


class ArcFaceHead(nn.Module):
    """Additive angular margin head (Deng et al., 2019).

    ``logit_j = s cos(theta_j)`` for ``j != y`` and ``s cos(theta_y + m)`` for the true class, where ``theta_j``
    is the angle between the embedding and class centre ``j``. Where ``theta_y + m`` would pass pi (cos stops
    decreasing) the target logit uses ``s (cos(theta_y) - m sin(m))`` so the logit stays monotone in the angle.

    Args:
        embedding_dim: D.
        num_classes: Number of identities.
        s: Scale (64 in GMIA).
        m: Angular margin in radians (0.5 in GMIA).
    """

    def __init__(self, embedding_dim: int, num_classes: int, s: float = 64.0, m: float = 0.5):
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        if not s > 0 or not 0 <= m < math.pi / 2:
            raise ValueError(f"need s > 0 and 0 <= m < pi/2, got s={s!r}, m={m!r}")
        self.s, self.m = float(s), float(m)
        self.weight = nn.Parameter(torch.empty(num_classes, embedding_dim))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Scaled cosine logits (N, num_classes), with the margin on the true class when ``labels`` is given."""
        cosine = F.linear(F.normalize(embeddings, dim=1), F.normalize(self.weight, dim=1))
        if labels is None:
            return self.s * cosine
        cosine = cosine.clamp(-1.0 + 1e-7, 1.0 - 1e-7)
        target_cosine = cosine.gather(1, labels.long()[:, None])
        sine = torch.sqrt(1.0 - target_cosine**2)
        with_margin = target_cosine * math.cos(self.m) - sine * math.sin(self.m)  # cos(theta + m)
        fallback = target_cosine - self.m * math.sin(self.m)
        target_logit = torch.where(target_cosine > math.cos(math.pi - self.m), with_margin, fallback)
        logits = cosine.scatter(1, labels.long()[:, None], target_logit)
        return self.s * logits
