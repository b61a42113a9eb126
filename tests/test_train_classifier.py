"""Tests of classifier training and prediction on tiny synthetic tasks."""

import numpy as np
import pytest
import torch

from anonpaper.models.classifiers import build_classifier
from anonpaper.models.normalization import InputNormalization
from anonpaper.train.augment import paper2_augmentation
from anonpaper.train.classifier import predict_proba, train_classifier
from anonpaper.train.loop import TrainSettings

pytestmark = pytest.mark.unit


def _separable(count, seed):
    """Class 0: bright left half; class 1: bright right half; plus noise (uint8, (N, 16, 16, 3))."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, count)
    images = rng.normal(0.3, 0.1, (count, 16, 16, 3))
    for index, label in enumerate(labels):
        if label == 0:
            images[index, :, :8] += 0.4
        else:
            images[index, :, 8:] += 0.4
    return (np.clip(images, 0, 1) * 255).astype(np.uint8), labels


def test_tiny_classifier_learns_separable_task():
    train, val = _separable(48, 0), _separable(24, 1)
    torch.manual_seed(0)
    model = build_classifier("small_cnn", 3, 2)
    result = train_classifier(model, train, val,
                              TrainSettings(epochs=5, batch_size=16, lr=3e-3, early_stopping_patience=3, seed=0,
                                            device="cpu", progress=False),
                              loss="focal")
    assert isinstance(result.model, InputNormalization)
    assert {"train_loss", "val_loss", "val_f1", "val_accuracy"} <= set(result.history.columns)
    assert result.best_score == result.history["val_f1"].max()
    assert result.best_score >= 0.9
    probabilities = predict_proba(result.model, val[0], batch_size=7)
    assert probabilities.shape == (24, 2) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    assert np.mean(probabilities.argmax(axis=1) == val[1]) >= 0.9
    # Normalisation statistics are those of the training images, stored with the model.
    expected = train[0].reshape(-1, 3).astype(np.float64).mean(axis=0) / 255
    assert np.allclose(result.model.mean.reshape(-1).numpy(), expected, atol=1e-5)


def test_classifier_training_is_deterministic_with_augmentation():
    train, val = _separable(20, 2), _separable(10, 3)
    weights = []
    for _ in range(2):
        torch.manual_seed(0)
        result = train_classifier(build_classifier("small_cnn", 3, 2), train, val,
                                  TrainSettings(epochs=2, batch_size=8, seed=7, device="cpu", progress=False),
                                  augment=paper2_augmentation())
        weights.append(torch.cat([p.reshape(-1) for p in result.model.state_dict().values()]))
    assert torch.equal(weights[0], weights[1])


def test_classifier_rejects_labels_out_of_range():
    train, val = _separable(10, 0), _separable(6, 1)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        train_classifier(build_classifier("small_cnn", 3, 2), (train[0], train[1] + 1), val,
                         TrainSettings(epochs=1, batch_size=4, device="cpu", progress=False))


def test_cosine_lr_schedule_anneals_and_unknown_schedule_is_rejected():
    train, val = _separable(16, 4), _separable(8, 5)
    torch.manual_seed(0)
    result = train_classifier(build_classifier("small_cnn", 3, 2), train, val,
                              TrainSettings(epochs=4, batch_size=8, lr=1e-2, lr_schedule="cosine", seed=0,
                                            device="cpu", progress=False))
    rates = result.history["lr"].to_numpy()
    # CosineAnnealingLR over 4 epochs: 1e-2 * (1 + cos(pi * t / 4)) / 2 for t = 0..3, logged before each step.
    expected = 1e-2 * (1 + np.cos(np.pi * np.arange(4) / 4)) / 2
    assert np.allclose(rates, expected, rtol=1e-6), rates
    constant = train_classifier(build_classifier("small_cnn", 3, 2), train, val,
                                TrainSettings(epochs=2, batch_size=8, lr=1e-2, seed=0, device="cpu", progress=False))
    assert np.allclose(constant.history["lr"].to_numpy(), 1e-2)
    with pytest.raises(ValueError, match="lr_schedule must be"):
        train_classifier(build_classifier("small_cnn", 3, 2), train, val,
                         TrainSettings(epochs=1, batch_size=8, lr_schedule="step", device="cpu", progress=False))


@pytest.mark.gpu
def test_classifier_loop_on_cuda_channels_last_with_augmentation_on_the_gpu():
    """The CUDA path of the loop (pinned non-blocking copies, augmentation on the GPU, channels-last, bfloat16
    autocast, the loss read once per epoch) trains and learns; CPU and GPU arithmetic differ, so only the outcome
    is compared."""
    train, val = _separable(48, 0), _separable(24, 1)
    torch.manual_seed(0)
    result = train_classifier(build_classifier("small_cnn", 3, 2), train, val,
                              TrainSettings(epochs=5, batch_size=16, lr=3e-3, seed=0, device="cuda", progress=False),
                              augment=paper2_augmentation())
    convolution = next(m for m in result.model.modules() if isinstance(m, torch.nn.Conv2d))
    assert convolution.weight.is_cuda and convolution.weight.is_contiguous(memory_format=torch.channels_last)
    assert np.isfinite(result.history["train_loss"]).all() and result.best_score >= 0.9


def test_channels_last_on_the_cpu_is_deterministic_learns_and_keys_its_checkpoint(tmp_path):
    """Asked for, the CPU trains in channels-last layout: the same seed gives the same weights, the task is learnt,
    and a checkpoint of the default layout (other floats) is not resumed as if it were the same run."""
    train, val = _separable(48, 0), _separable(24, 1)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        runs.append(train_classifier(build_classifier("small_cnn", 3, 2), train, val,
                                     TrainSettings(epochs=5, batch_size=16, lr=3e-3, seed=0, device="cpu",
                                                   progress=False, channels_last=True),
                                     augment=paper2_augmentation()))
    convolution = next(m for m in runs[0].model.modules() if isinstance(m, torch.nn.Conv2d))
    assert convolution.weight.is_contiguous(memory_format=torch.channels_last)
    for name, value in runs[0].model.state_dict().items():
        assert torch.equal(value, runs[1].model.state_dict()[name]), name
    assert runs[0].best_score >= 0.9
    # Its predictions are the same function whatever layout the images come in.
    images = torch.from_numpy(val[0]).permute(0, 3, 1, 2).float() / 255
    probabilities = predict_proba(runs[0].model, images)
    assert np.allclose(predict_proba(runs[0].model, images.contiguous(memory_format=torch.channels_last)),
                       probabilities, atol=1e-6)

    checkpoint = tmp_path / "classifier.pt"
    train_classifier(build_classifier("small_cnn", 3, 2), train, val,
                     TrainSettings(epochs=1, batch_size=16, device="cpu", progress=False, checkpoint_path=checkpoint))
    with pytest.raises(ValueError, match="belongs to another run"):
        train_classifier(build_classifier("small_cnn", 3, 2), train, val,
                         TrainSettings(epochs=1, batch_size=16, device="cpu", progress=False,
                                       checkpoint_path=checkpoint, channels_last=True))


def test_channels_last_is_validated_and_refused_by_trainers_without_it():
    with pytest.raises(ValueError, match="channels_last must be True, False or None, got 'yes'"):
        TrainSettings(epochs=1, channels_last="yes")
    from anonpaper.models.unet import UNet
    from anonpaper.train.segmenter import train_segmenter

    images = np.zeros((4, 16, 16, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="train_segmenter does not use channels_last"):
        train_segmenter(UNet(3, 1, base_width=4, depth=2), images, np.zeros((4, 16, 16), dtype=bool),
                        TrainSettings(epochs=1, batch_size=2, device="cpu", progress=False, channels_last=True))
