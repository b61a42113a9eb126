"""Tests of the generic training loop: determinism, exact resume, early stopping, augmentation."""

import numpy as np
import pytest
import torch
from torch import nn

from anonpaper.train.augment import FlipShiftScaleRotate
from anonpaper.train.loop import as_image_tensor, fit

pytestmark = pytest.mark.unit


class _Interrupt(Exception):
    pass


def _problem(seed=0):
    generator = torch.Generator().manual_seed(123)
    features = torch.randn(40, 5, generator=generator)
    targets = features @ torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.1 * torch.randn(40, generator=generator)
    torch.manual_seed(seed)
    # Dropout makes the run depend on the global RNG too, which the loop must control.
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))

    def batches(epoch, generator):
        order = torch.randperm(40, generator=generator)
        for start in range(0, 40, 8):
            index = order[start:start + 8]
            yield features[index] + 0.05 * torch.randn(len(index), 5, generator=generator), targets[index]

    def step(network, batch):
        x, y = batch
        return (network(x)[:, 0] - y).square().mean()

    def evaluate(network):
        return {"val_mse": float((network(features)[:, 0] - targets).square().mean())}

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
    return dict(model=model, batches=batches, step=step, evaluate=evaluate, optimizer=optimizer,
                scheduler=scheduler)


def _run(seed, **kwargs):
    parts = _problem()
    result = fit(parts["model"], batches=parts["batches"], step=parts["step"], optimizer=parts["optimizer"],
                 scheduler=parts["scheduler"], evaluate=parts["evaluate"], epochs=6, monitor="val_mse", mode="min",
                 seed=seed, device="cpu", progress=False, config={"test": 1}, **kwargs)
    return result


def _weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.state_dict().values()])


def test_same_seed_same_weights_and_different_seed_differs():
    first, second, other = _run(3), _run(3), _run(4)
    assert torch.equal(_weights(first.model), _weights(second.model))
    assert not torch.equal(_weights(first.model), _weights(other.model))
    assert list(first.history["epoch"]) == [1, 2, 3, 4, 5, 6]
    assert first.history["val_mse"].iloc[-1] < first.history["val_mse"].iloc[0]
    assert first.best_score == first.history["val_mse"].min()


def test_resume_equals_uninterrupted(tmp_path):
    uninterrupted = _run(5)
    path = tmp_path / "checkpoint.pt"

    def interrupt(epoch, row):
        if epoch == 3:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        _run(5, checkpoint_path=path, on_epoch_end=interrupt)
    # Scramble the global RNG as a fresh process would; the resumed run must not depend on it.
    torch.manual_seed(999)
    np.random.seed(999)
    resumed = _run(5, checkpoint_path=path)
    assert torch.equal(_weights(uninterrupted.model), _weights(resumed.model))
    assert resumed.best_epoch == uninterrupted.best_epoch
    assert np.allclose(resumed.history["val_mse"], uninterrupted.history["val_mse"])
    # A finished checkpoint returns the same result without training.
    again = _run(5, checkpoint_path=path)
    assert torch.equal(_weights(again.model), _weights(uninterrupted.model))


def test_checkpoint_of_another_run_is_rejected(tmp_path):
    path = tmp_path / "checkpoint.pt"
    _run(1, checkpoint_path=path)
    with pytest.raises(ValueError, match="another run"):
        _run(2, checkpoint_path=path)


def test_early_stopping_keeps_best_epoch():
    parts = _problem()
    scores = iter([0.5, 0.7, 0.6, 0.65, 0.4, 0.9])
    result = fit(parts["model"], batches=parts["batches"], step=parts["step"], optimizer=parts["optimizer"],
                 evaluate=lambda network: {"score": next(scores)}, epochs=6, monitor="score", mode="max",
                 early_stopping_patience=2, seed=0, device="cpu", progress=False)
    assert result.stopped_early and len(result.history) == 4 and result.best_epoch == 2
    assert result.best_score == pytest.approx(0.7)


def test_fit_rejects_unknown_monitor():
    parts = _problem()
    with pytest.raises(ValueError, match="monitor"):
        fit(parts["model"], batches=parts["batches"], step=parts["step"], optimizer=parts["optimizer"], epochs=1,
            monitor="val_f1", seed=0, device="cpu", progress=False)


def test_augmentation_is_deterministic_and_moves_masks_with_images():
    augment = FlipShiftScaleRotate(flip_probability=0.5, affine_probability=1.0, rotate_limit=0.0,
                                   scale_limit=0.0, shift_limit=0.0)
    images = torch.rand(6, 2, 16, 16)
    masks = images[:, 0] > 0.5
    original = images.clone()
    out1, masks1 = augment(images, torch.Generator().manual_seed(0), masks)
    out2, _ = augment(images, torch.Generator().manual_seed(0), masks)
    assert torch.equal(images, original)
    assert torch.equal(out1, out2) and masks1.dtype == torch.bool
    # With a zero-parameter affine the transform is a flip or the identity (up to interpolation at pixel centres).
    for index in range(6):
        flipped = torch.allclose(out1[index], images[index].flip(-1), atol=1e-5)
        same = torch.allclose(out1[index], images[index], atol=1e-5)
        assert flipped or same
        assert torch.equal(masks1[index], out1[index, 0] > 0.5)


def test_augmentation_rotation_moves_mask_consistently():
    augment = FlipShiftScaleRotate(0.0, 1.0, shift_limit=0.1, scale_limit=0.1, rotate_limit=45.0)
    images = torch.zeros(4, 1, 32, 32)
    images[:, :, 8:24, 14:18] = 1.0
    masks = images[:, 0].clone()
    out, out_masks = augment(images, torch.Generator().manual_seed(1), masks)
    # Nearest-sampled mask and bilinear image agree except along edges.
    agreement = ((out[:, 0] > 0.5) == (out_masks > 0.5)).float().mean()
    assert agreement > 0.97
    assert not torch.equal(out_masks, masks)


def test_as_image_tensor_formats():
    gray = np.full((2, 4, 5), 255, dtype=np.uint8)
    color = np.zeros((2, 4, 5, 3), dtype=np.uint8)
    assert as_image_tensor(gray).shape == (2, 1, 4, 5) and as_image_tensor(gray).max() == 1.0
    assert as_image_tensor(color).shape == (2, 3, 4, 5)
    with pytest.raises(ValueError, match="uint8"):
        as_image_tensor(gray.astype(np.float32))
