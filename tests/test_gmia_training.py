"""GMIA projection: the encoder's shapes, co-training (E + S + D) and E-training (E only, frozen G) on tiny random
networks (sg2-tiny, one channel, 32 px) with a tiny feature-tap network as the perceptual distance."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from anonpaper.metrics.quality import feature_tap_distance
from anonpaper.models.encoders import EncoderGenerator, LatentEncoder
from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator, get_config, to_signed_range
from anonpaper.train.gan import GANTrainingConfig
from anonpaper.train.gmia import ProjectionTrainingSettings, co_train, reconstruction_loss, train_encoder

pytestmark = pytest.mark.unit

CONFIG = get_config("sg2-tiny", image_channels=1)


def _images(count: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.rand(count, 1, 32, 32, generator=torch.Generator().manual_seed(seed))


def _perceptual():
    torch.manual_seed(5)
    taps = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
    return lambda real, fake: feature_tap_distance(real, fake, lambda x: [taps(x)], reduction="none")


def _recon_loss(encoder, generator, images, perceptual) -> float:
    with torch.no_grad():
        real = to_signed_range(images)
        fake = generator.synthesis(encoder(real), noise_mode="const")
        return float(reconstruction_loss(real, fake, 10.0, 10.0, perceptual)[0])


def _settings(**gan_changes) -> ProjectionTrainingSettings:
    gan = dict(total_steps=6, batch_size=4, r1_interval=4, path_length_interval=2, progress=False, seed=1,
               style_mixing_probability=0.0)
    gan.update(gan_changes)
    return ProjectionTrainingSettings(gan=GANTrainingConfig(**gan), encoder_epoch_steps=3)


@pytest.mark.parametrize("space", ["w", "w+"])
def test_encoder_output_shape_and_space(space):
    generator = StyleGenerator(CONFIG, seed=0)
    encoder = LatentEncoder(CONFIG, generator.num_ws, space=space, seed=1)
    images = to_signed_range(_images(3)).requires_grad_(True)
    ws = encoder(images)
    assert ws.shape == (3, generator.num_ws, CONFIG.w_dim) and ws.dtype == torch.float32
    rows_equal = bool((ws == ws[:, :1]).all())
    assert rows_equal == (space == "w")
    assert generator.synthesis(ws).shape == images.shape  # the latents drive the generator
    ws.sum().backward()
    assert images.grad is not None and images.grad.abs().sum() > 0
    # Deterministic initialisation; the trunk has one block per resolution from 32 to 8 px.
    again = LatentEncoder(CONFIG, generator.num_ws, space=space, seed=1)
    assert torch.equal(again(images.detach()), ws.detach()) and len(encoder.blocks) == 3
    with pytest.raises(ValueError, match=r"\(N, 1, 32, 32\)"):
        encoder(torch.zeros(2, 3, 32, 32))
    with pytest.raises(ValueError, match="space"):
        LatentEncoder(CONFIG, generator.num_ws, space="z")
    with pytest.raises(ValueError, match="num_ws"):
        EncoderGenerator(LatentEncoder(CONFIG, generator.num_ws + 1), generator)


def test_reconstruction_loss_closed_form():
    real = torch.full((2, 1, 4, 4), -1.0)  # 0 on the [0, 1] scale
    fake = torch.full((2, 1, 4, 4), 0.0)  # 0.5 on the [0, 1] scale
    loss, logs = reconstruction_loss(real, fake, mse_weight=10.0, perceptual_weight=3.0,
                                     perceptual_distance=lambda a, b: (a - b).abs().mean(dim=(1, 2, 3)))
    assert logs["mse"] == pytest.approx(0.25) and logs["perceptual"] == pytest.approx(0.5)
    assert float(loss) == pytest.approx(10 * 0.25 + 3 * 0.5)
    only_mse, logs = reconstruction_loss(real, fake, 10.0, 3.0, None)
    assert float(only_mse) == pytest.approx(2.5) and logs["perceptual"] != logs["perceptual"]  # NaN


def test_co_training_lowers_reconstruction_loss_and_resumes_exactly(tmp_path):
    images, perceptual = _images(), _perceptual()
    generator, discriminator = StyleGenerator(CONFIG, seed=0), ResidualDiscriminator(CONFIG, seed=1)
    encoder = LatentEncoder(CONFIG, generator.num_ws, seed=2)
    before = _recon_loss(encoder, generator, images, perceptual)
    result = co_train(encoder, generator, discriminator, images, _settings(output_dir=str(tmp_path / "a")),
                      perceptual, device="cpu")
    assert result.scheme == "co-training" and result.discriminator is discriminator
    trained = result.training.generator  # the raw (non-EMA) autoencoder: E and S were both updated in place
    assert trained.encoder is encoder and trained.generator is generator
    after = _recon_loss(encoder, generator, images, perceptual)
    assert after < 0.8 * before
    assert _recon_loss(result.encoder, result.generator, images, perceptual) < before  # the EMA too
    history = result.history
    assert history["loss_g_extra"].notna().all() and history["extra_perceptual"].notna().all()
    assert history["loss_r1"].notna().sum() == 2 and history["loss_path_length"].notna().sum() == 3
    # Interrupted after 3 steps and resumed: the same weights as the uninterrupted run, bit for bit.
    models = [StyleGenerator(CONFIG, seed=0), ResidualDiscriminator(CONFIG, seed=1)]
    co_train(LatentEncoder(CONFIG, models[0].num_ws, seed=2), *models, images,
             _settings(output_dir=str(tmp_path / "b"), total_steps=3), perceptual, device="cpu")
    models = [StyleGenerator(CONFIG, seed=0), ResidualDiscriminator(CONFIG, seed=1)]
    resumed = co_train(LatentEncoder(CONFIG, models[0].num_ws, seed=2), *models, images,
                       _settings(output_dir=str(tmp_path / "b")), perceptual, device="cpu")
    assert resumed.training.resumed_from_step == 3
    for name, value in result.training.generator.state_dict().items():
        assert torch.equal(value, resumed.training.generator.state_dict()[name]), name


def test_encoder_training_lowers_loss_and_leaves_the_generator_unchanged(tmp_path):
    images, perceptual = _images(), _perceptual()
    generator = StyleGenerator(CONFIG, seed=0)
    generator.requires_grad_(True)
    frozen = {name: value.clone() for name, value in generator.state_dict().items()}
    encoder = LatentEncoder(CONFIG, generator.num_ws, seed=2)
    before = _recon_loss(encoder, generator, images, perceptual)
    result = train_encoder(encoder, generator, images, _settings(output_dir=str(tmp_path), total_steps=12),
                           perceptual, device="cpu")
    assert result.scheme == "encoder-training" and result.discriminator is None and result.generator is generator
    assert list(result.history["epoch"]) == [1, 2, 3, 4]  # 12 steps in epochs of 3
    losses = list(result.history["train_loss"])
    assert losses[-1] < losses[0] and _recon_loss(result.encoder, generator, images, perceptual) < 0.9 * before
    assert all(torch.equal(frozen[name], value) for name, value in generator.state_dict().items())
    assert all(p.requires_grad and p.grad is None for p in generator.parameters())
    assert (tmp_path / "encoder_checkpoint.pt").exists()


def test_settings_validation():
    with pytest.raises(ValueError, match="mse_weight"):
        ProjectionTrainingSettings(mse_weight=-1.0)
    with pytest.raises(ValueError, match="GANTrainingConfig"):
        ProjectionTrainingSettings(gan={"total_steps": 3})
    with pytest.raises(ValueError, match="encoder_epoch_steps"):
        ProjectionTrainingSettings(encoder_epoch_steps=0)
    settings = ProjectionTrainingSettings()
    assert (settings.mse_weight, settings.perceptual_weight, settings.gan.generator_lr, settings.gan.betas,
            settings.gan.r1_gamma, settings.gan.path_length_weight) == (10.0, 10.0, 0.0025, (0.0, 0.99), 1.0, 2.0)
