"""Image classifiers (timm ResNet-D family, a tiny CNN), class-weighted focal loss and saliency maps.

Paper 2 trains ResNet-200D (timm ``resnet200d``) for sex (cross-entropy) and DR grade (class-weighted focal loss,
gamma 0.6). ImageNet weights are not available offline, so every network here starts from random weights
(``pretrained=False``); CPU profiles use smaller members of the same family.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

TIMM_CLASSIFIERS = ("resnet200d", "resnet50d", "resnet26d", "resnet18d", "resnet10t")
CLASSIFIER_NAMES = TIMM_CLASSIFIERS + ("small_cnn",)


class SmallCNN(nn.Module):
    """A tiny CNN for smoke tests: 3 (conv3x3 - BN - ReLU - maxpool) stages, global average pool, linear.

    Args:
        in_channels: Image channels.
        num_classes: Output logits.
        width: Channels of the first stage (doubled per stage).

    Attributes:
        features: The convolutional trunk; ``features[-1]`` is a sensible Grad-CAM layer.
    """

    def __init__(self, in_channels: int, num_classes: int, width: int = 16):
        super().__init__()
        stages: list[nn.Module] = []
        channels = in_channels
        for index in range(3):
            out = width * 2**index
            stages.append(nn.Sequential(nn.Conv2d(channels, out, 3, padding=1, bias=False), nn.BatchNorm2d(out),
                                        nn.ReLU(inplace=True), nn.MaxPool2d(2) if index < 2 else nn.Identity()))
            channels = out
        self.features = nn.Sequential(*stages)
        self.num_features = channels
        self.fc = nn.Linear(channels, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled features (N, num_features)."""
        return self.features(x).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (N, num_classes) for float input (N, in_channels, H, W)."""
        return self.fc(self.forward_features(x))


def build_classifier(name: str, in_channels: int, num_classes: int) -> nn.Module:
    """A randomly initialised classifier.

    Args:
        name: One of ``"resnet200d"``, ``"resnet50d"``, ``"resnet26d"``, ``"resnet18d"``, ``"resnet10t"`` (timm,
            ``pretrained=False``) or ``"small_cnn"`` (:class:`SmallCNN`).
        in_channels: Image channels (1 or 3).
        num_classes: Number of output logits (>= 2; binary tasks use 2 logits and softmax).

    Returns:
        nn.Module mapping float (N, in_channels, H, W) to logits (N, num_classes).

    Raises:
        ValueError: On an unknown name or non-positive channel/class counts.
    """
    if name not in CLASSIFIER_NAMES:
        raise ValueError(f"unknown classifier {name!r}; expected one of {CLASSIFIER_NAMES}")
    if not isinstance(in_channels, int) or in_channels < 1:
        raise ValueError(f"in_channels must be a positive integer, got {in_channels!r}")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if name == "small_cnn":
        return SmallCNN(in_channels, num_classes)
    import timm  # its huggingface_hub imports tqdm.auto: anonpaper/__init__.py silences the notebook warning

    return timm.create_model(name, pretrained=False, in_chans=in_channels, num_classes=num_classes)


def default_cam_layer(model: nn.Module) -> nn.Module:
    """The last convolutional stage of a classifier built by :func:`build_classifier` (wrappers unwrapped)."""
    from anonpaper.models.normalization import unwrap

    inner = unwrap(model)
    if isinstance(inner, SmallCNN):
        return inner.features[-1]
    if hasattr(inner, "layer4"):
        return inner.layer4
    raise ValueError(f"no default Grad-CAM layer for {type(inner).__name__}; pass layer= explicitly")


def balanced_class_weights(labels: np.ndarray | torch.Tensor, num_classes: int) -> torch.Tensor:
    """scikit-learn's "balanced" weights ``n_samples / (n_classes_present * count_c)``; 0 for absent classes.

    Args:
        labels: Integer labels (N,) in [0, num_classes).
        num_classes: Number of classes.

    Returns:
        Float32 tensor (num_classes,).
    """
    labels = torch.as_tensor(np.asarray(labels)).long().reshape(-1)
    if labels.numel() == 0 or labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"labels must be non-empty integers in [0, {num_classes}), got range "
                         f"[{labels.min().item() if labels.numel() else None}, "
                         f"{labels.max().item() if labels.numel() else None}]")
    counts = torch.bincount(labels, minlength=num_classes).double()
    present = int((counts > 0).sum())
    weights = torch.where(counts > 0, labels.numel() / (present * counts.clamp(min=1)), torch.zeros_like(counts))
    return weights.float()


class FocalLoss(nn.Module):
    """Class-weighted multi-class focal loss (Lin et al., 2017).

    ``loss_i = -w[y_i] (1 - p_i)^gamma log p_i`` with ``p_i`` the softmax probability of the true class, averaged
    as ``sum_i loss_i / sum_i w[y_i]`` -- the normalisation of ``F.cross_entropy(weight=w)``, so ``gamma = 0``
    equals weighted cross-entropy exactly. Lower is better.

    Args:
        gamma: Focusing parameter >= 0 (paper 2 uses 0.6).
        class_weights: Optional per-class weights (num_classes,), non-negative; None means all ones.
    """

    def __init__(self, gamma: float = 0.6, class_weights: Sequence[float] | torch.Tensor | None = None):
        super().__init__()
        if not gamma >= 0:
            raise ValueError(f"gamma must be >= 0, got {gamma!r}")
        self.gamma = float(gamma)
        if class_weights is not None:
            weights = torch.as_tensor(class_weights, dtype=torch.float32).reshape(-1)
            if torch.any(weights < 0) or not torch.all(torch.isfinite(weights)):
                raise ValueError(f"class_weights must be finite and non-negative, got {weights.tolist()}")
            self.register_buffer("class_weights", weights)
        else:
            self.class_weights = None

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Scalar loss.

        Args:
            logits: Float tensor (N, C).
            target: Integer tensor (N,) with values in [0, C).
        """
        if logits.ndim != 2 or target.shape != logits.shape[:1]:
            raise ValueError(f"expected logits (N, C) and target (N,), got {tuple(logits.shape)} and "
                             f"{tuple(target.shape)}")
        log_probability = F.log_softmax(logits.float(), dim=1).gather(1, target.long()[:, None])[:, 0]
        probability = log_probability.exp()
        loss = -((1.0 - probability).clamp(min=0) ** self.gamma) * log_probability
        if self.class_weights is None:
            return loss.mean()
        if self.class_weights.numel() != logits.shape[1]:
            raise ValueError(f"class_weights has {self.class_weights.numel()} entries for {logits.shape[1]} classes")
        weights = self.class_weights.to(logits.device)[target.long()]
        return (weights * loss).sum() / weights.sum().clamp(min=1e-12)


def _targets(model: nn.Module, images: torch.Tensor, target) -> torch.Tensor:
    """Target class per image: given ints/sequence, or the predicted class when None."""
    count = images.shape[0]
    if target is None:
        with torch.no_grad():
            return model(images).argmax(dim=1)
    target = torch.as_tensor(np.asarray(target)).long().reshape(-1).to(images.device)
    if target.numel() == 1:
        target = target.expand(count)
    if target.numel() != count:
        raise ValueError(f"target must be one class or one per image ({count}), got {target.numel()}")
    return target


def _normalise_maps(maps: torch.Tensor) -> torch.Tensor:
    """Scale each map (N, H, W) to [0, 1] by its maximum; all-zero maps stay zero."""
    peak = maps.flatten(1).amax(dim=1).clamp(min=1e-12)
    return (maps / peak[:, None, None]).clamp(0.0, 1.0)


def gradient_saliency(model: nn.Module, images: torch.Tensor, target=None) -> torch.Tensor:
    """Vanilla gradient saliency (Simonyan et al., 2014): ``max_c |d logit_target / d x_c|`` per pixel.

    The model is evaluated in eval mode (restored afterwards); the input tensor is not modified.

    Args:
        model: Classifier mapping (N, C, H, W) to logits (N, K).
        images: Float tensor (N, C, H, W) as the model expects it.
        target: Class index, sequence of N indices, or None for each image's predicted class.

    Returns:
        Float tensor (N, H, W) in [0, 1] (each map divided by its maximum; higher = more influential).
    """
    if images.ndim != 4:
        raise ValueError(f"expected images (N, C, H, W), got {tuple(images.shape)}")
    was_training = model.training
    model.eval()
    try:
        classes = _targets(model, images, target)
        inputs = images.detach().clone().requires_grad_(True)
        logits = model(inputs)
        score = logits.gather(1, classes[:, None]).sum()
        (gradient,) = torch.autograd.grad(score, inputs)
    finally:
        model.train(was_training)
    return _normalise_maps(gradient.abs().amax(dim=1)).detach()


def grad_cam(model: nn.Module, images: torch.Tensor, target=None, layer: nn.Module | None = None) -> torch.Tensor:
    """Grad-CAM (Selvaraju et al., 2017): ``ReLU(sum_k mean_xy(dy/dA_k) A_k)`` upsampled to the input size.

    Args:
        model: Classifier mapping (N, C, H, W) to logits (N, K).
        images: Float tensor (N, C, H, W).
        target: Class index, sequence of N indices, or None for the predicted class.
        layer: Module whose output activations A (N, K', h, w) are used; None picks
            :func:`default_cam_layer`.

    Returns:
        Float tensor (N, H, W) in [0, 1] (bilinear upsampling, each map divided by its maximum).
    """
    if images.ndim != 4:
        raise ValueError(f"expected images (N, C, H, W), got {tuple(images.shape)}")
    layer = default_cam_layer(model) if layer is None else layer
    captured: dict[str, torch.Tensor] = {}

    def hook(_module, _inputs, output):
        captured["activation"] = output

    handle = layer.register_forward_hook(hook)
    was_training = model.training
    model.eval()
    try:
        classes = _targets(model, images, target)
        with torch.enable_grad():
            # The input requires grad so that the graph reaches layers that have no parameters upstream.
            logits = model(images.detach().clone().requires_grad_(True))
            activation = captured.get("activation")
            if activation is None or activation.ndim != 4:
                raise ValueError("the Grad-CAM layer must run in the forward pass and output (N, K, h, w), got "
                                 f"{None if activation is None else tuple(activation.shape)}")
            score = logits.gather(1, classes[:, None]).sum()
            (gradient,) = torch.autograd.grad(score, activation)
    finally:
        handle.remove()
        model.train(was_training)
    weights = gradient.mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * activation).sum(dim=1, keepdim=True))
    cam = F.interpolate(cam, size=images.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
    return _normalise_maps(cam).detach()
