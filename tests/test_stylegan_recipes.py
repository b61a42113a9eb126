"""GAN recipes per configuration (learning rates, R1 gamma, minibatch-std group, EMA decays) and the path-length
penalty's gradient, against the official StyleGAN2-ADA / StyleGAN3 configurations and closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from anonpaper.models.stylegan import ResidualDiscriminator, StyleGenerator, get_config
from anonpaper.train.gan import (GANTrainingConfig, magnitude_ema_beta, path_length_penalty, train_gan)

pytestmark = pytest.mark.unit


def test_discriminator_learning_rate_per_architecture_and_config():
    assert GANTrainingConfig.for_architecture("sg3t").discriminator_lr == 0.002
    assert GANTrainingConfig.for_architecture("sg2").discriminator_lr == 0.0025
    assert GANTrainingConfig.for_stylegan_config("sg3t-paper256").discriminator_lr == 0.002
    assert GANTrainingConfig.for_stylegan_config("sg3t-paper256").generator_lr == 0.0025
    assert GANTrainingConfig.for_stylegan_config("sg2-paper256").discriminator_lr == 0.0025
    assert GANTrainingConfig.for_stylegan_config("sg3t-tiny").discriminator_lr == 0.002


def test_r1_gamma_per_config():
    assert GANTrainingConfig.for_stylegan_config("sg3t-paper256").r1_gamma == 2.0
    assert GANTrainingConfig.for_stylegan_config("sg2-paper256").r1_gamma == 1.0
    assert GANTrainingConfig.for_stylegan_config("sg2-gmia256").r1_gamma == 1.0
    # ADA's automatic rule, with the final batch size.
    assert GANTrainingConfig.for_stylegan_config("sg2-ada512", batch_size=64).r1_gamma == pytest.approx(
        0.0002 * 512 ** 2 / 64)
    assert GANTrainingConfig.for_stylegan_config("sg3t-paper256", r1_gamma=8.2).r1_gamma == 8.2
    sg3 = GANTrainingConfig.for_stylegan_config("sg3t-paper256")
    assert sg3.path_length_weight == 0.0 and sg3.style_mixing_probability == 0.0 and sg3.batch_size == 32
    with pytest.raises(ValueError, match="unknown StyleGAN config"):
        GANTrainingConfig.for_stylegan_config("sg4-paper256")


def test_minibatch_std_group_per_config():
    assert get_config("sg2-paper256").minibatch_std_group_size == 8
    assert get_config("sg3t-paper256").minibatch_std_group_size == 4
    assert get_config("sg2-ada512").minibatch_std_group_size == 4
    assert ResidualDiscriminator(get_config("sg2-tiny").replace(minibatch_std_group_size=8)).mbstd_group_size == 8


def test_magnitude_ema_beta_is_half_life_in_images():
    assert magnitude_ema_beta(32, 20.0) == pytest.approx(0.5 ** (32 / 20_000))
    # After half_life_kimg * 1000 images the old estimate weighs one half.
    assert magnitude_ema_beta(8, 20.0) ** (20_000 / 8) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="magnitude_ema_kimg"):
        GANTrainingConfig(magnitude_ema_kimg=0.0)


def test_train_gan_sets_the_sg3_magnitude_decay_from_the_batch():
    config = get_config("sg3t-tiny")
    generator, discriminator = StyleGenerator(config, seed=0), ResidualDiscriminator(config, seed=1)
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    training = GANTrainingConfig.for_architecture("sg3t", total_steps=1, batch_size=4, r1_interval=2,
                                                  progress=False, magnitude_ema_kimg=20.0)
    result = train_gan(generator, discriminator, images, training, device="cpu")
    betas = {module.magnitude_ema_beta for module in result.generator.modules() if hasattr(module, "magnitude_ema")}
    assert betas == {0.5 ** (4 / 20_000)}


def test_path_length_penalty_gradient_flows_through_the_updated_mean():
    lengths = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64, requires_grad=True)
    running_mean, decay = torch.tensor(1.5, dtype=torch.float64), 0.25
    penalty, new_mean = path_length_penalty(lengths, running_mean, decay)
    penalty.mean().backward()
    values, n = lengths.detach(), 3
    updated = running_mean + decay * (values.mean() - running_mean)
    assert float(new_mean) == pytest.approx(float(updated)) and not new_mean.requires_grad
    torch.testing.assert_close(penalty.detach(), (values - updated) ** 2)
    # d/dl_i mean_j (l_j - a')^2 with a' = (1 - d) a + d mean(l): 2/n (l_i - a') - 2 d / n^2 sum_j (l_j - a').
    residual = values - updated
    expected = 2 / n * residual - 2 * decay / n ** 2 * residual.sum()
    torch.testing.assert_close(lengths.grad, expected)
    assert not math.isclose(float(residual.sum()), 0.0)  # the second term matters for this input
