"""Tests of the classifier factory, focal loss and saliency maps against closed forms."""

import numpy as np
import pytest
import torch
from sklearn.utils.class_weight import compute_class_weight
from torch import nn
from torch.nn import functional as F

from anonpaper.models.classifiers import (FocalLoss, balanced_class_weights, build_classifier, grad_cam,
                                          gradient_saliency)
from anonpaper.models.embedding import ArcFaceHead, EmbeddingNet

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["small_cnn", "resnet10t", "resnet18d"])
def test_build_classifier_shapes(name):
    torch.manual_seed(0)
    model = build_classifier(name, in_channels=1, num_classes=3)
    assert model(torch.rand(2, 1, 32, 32)).shape == (2, 3)


def test_build_classifier_rejects_unknown():
    with pytest.raises(ValueError, match="unknown classifier"):
        build_classifier("vgg16", 3, 2)
    with pytest.raises(ValueError, match="num_classes"):
        build_classifier("small_cnn", 3, 1)


def test_focal_loss_gamma_zero_is_weighted_cross_entropy():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(17, 3, generator=generator)
    target = torch.randint(0, 3, (17,), generator=generator)
    weights = torch.tensor([0.5, 2.0, 1.3])
    assert torch.allclose(FocalLoss(0.0, weights)(logits, target), F.cross_entropy(logits, target, weight=weights),
                          atol=1e-6)
    assert torch.allclose(FocalLoss(0.0)(logits, target), F.cross_entropy(logits, target), atol=1e-6)


def test_focal_loss_closed_form():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    target = torch.tensor([0, 0, 1])
    weights = torch.tensor([1.0, 3.0])
    gamma = 0.6
    p = [1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(1.0)), 0.5]
    w = [1.0, 1.0, 3.0]
    expected = sum(-wi * (1 - pi) ** gamma * np.log(pi) for wi, pi in zip(w, p)) / sum(w)
    assert FocalLoss(gamma, weights)(logits, target).item() == pytest.approx(expected, rel=1e-5)
    # Focusing down-weights easy examples: the loss is below cross-entropy for gamma > 0.
    assert FocalLoss(2.0)(logits, target) < F.cross_entropy(logits, target)


def test_balanced_weights_match_sklearn():
    labels = np.array([0, 0, 0, 1, 2, 2, 0, 1])
    expected = compute_class_weight("balanced", classes=np.arange(3), y=labels)
    assert np.allclose(balanced_class_weights(labels, 3).numpy(), expected)
    assert balanced_class_weights(np.array([0, 0, 2]), 3)[1] == 0


def test_gradient_saliency_of_linear_model_is_weight_magnitude():
    torch.manual_seed(0)
    linear = nn.Linear(2 * 4 * 4, 3)
    model = nn.Sequential(nn.Flatten(), linear)
    images = torch.rand(2, 2, 4, 4)
    copy = images.clone()
    maps = gradient_saliency(model, images, target=[1, 2])
    assert torch.equal(images, copy)
    for row, cls in enumerate([1, 2]):
        expected = linear.weight[cls].detach().abs().reshape(2, 4, 4).amax(dim=0)
        assert torch.allclose(maps[row], expected / expected.max(), atol=1e-6)


class _PoolLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Identity()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(self.layer(x).mean(dim=(2, 3)))


def test_grad_cam_closed_form():
    torch.manual_seed(0)
    model = _PoolLinear()
    images = torch.rand(1, 2, 5, 5)
    cam = grad_cam(model, images, target=0, layer=model.layer)
    # d logit_0 / d A_k(x, y) = w_0k / (H W), so the CAM is ReLU(sum_k w_0k / 25 * A_k) (no resizing needed).
    expected = torch.relu((model.fc.weight[0].detach()[:, None, None] / 25 * images[0]).sum(0))
    expected = expected / expected.max().clamp(min=1e-12)
    assert cam.shape == (1, 5, 5)
    assert torch.allclose(cam[0], expected, atol=1e-6)


def test_grad_cam_default_layer_range():
    torch.manual_seed(0)
    model = build_classifier("resnet10t", 3, 2)
    maps = grad_cam(model, torch.rand(2, 3, 64, 64))
    assert maps.shape == (2, 64, 64) and maps.min() >= 0 and maps.max() <= 1
    assert model.training  # mode restored


def test_embedding_net_unit_norm_and_arcface_closed_form():
    torch.manual_seed(0)
    network = EmbeddingNet(1, 8, backbone="small_cnn").eval()
    z = network(torch.rand(3, 1, 16, 16))
    assert z.shape == (3, 8) and torch.allclose(z.norm(dim=1), torch.ones(3), atol=1e-5)
    head = ArcFaceHead(8, 4, s=10.0, m=0.3)
    labels = torch.tensor([0, 3, 1])
    logits = head(z, labels)
    cosine = F.normalize(z, dim=1) @ F.normalize(head.weight, dim=1).T
    expected = cosine.clone()
    for row, label in enumerate(labels.tolist()):
        theta = torch.arccos(cosine[row, label])
        expected[row, label] = torch.cos(theta + 0.3)
    assert torch.allclose(logits, 10.0 * expected, atol=1e-4)
    assert torch.allclose(head(z), 10.0 * cosine, atol=1e-5)
