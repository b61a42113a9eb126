"""The generator capacity probe: the fit reproduces its targets better with each step, a StyleGAN3's input
magnitudes are calibrated and its running-mean rate restored, and a StyleGAN2 is left as it is."""

from __future__ import annotations

import torch

from anonpaper.models.stylegan import StyleGenerator, get_config


def test_the_fit_moves_towards_its_targets(load_benchmark):
    probe = load_benchmark("generator_capacity_probe")
    torch.manual_seed(0)
    targets = torch.rand(2, 3, 32, 32)
    errors = []
    for steps in (1, 30):
        generator = StyleGenerator(get_config("sg2-tiny", resolution=32), seed=0)
        reconstructed = probe.fit(generator, targets, steps, 0.01)
        assert reconstructed.shape == targets.shape and 0 <= reconstructed.min() <= reconstructed.max() <= 1
        errors.append(float(torch.mean((reconstructed - targets) ** 2)))
    assert errors[1] < 0.8 * errors[0]


def test_stylegan3_magnitudes_are_calibrated_and_stylegan2_is_untouched(load_benchmark):
    probe = load_benchmark("generator_capacity_probe")
    generator = StyleGenerator(get_config("sg3t-tiny", resolution=32), seed=0)
    layers = [module for module in generator.modules() if hasattr(module, "magnitude_ema_beta")]
    assert layers and all(float(layer.magnitude_ema) == 1.0 for layer in layers)
    probe.calibrate_magnitudes(generator, batches=2)
    assert any(float(layer.magnitude_ema) != 1.0 for layer in layers)
    assert all(layer.magnitude_ema_beta == get_config("sg3t-tiny").sg3_magnitude_ema_beta for layer in layers)
    plain = StyleGenerator(get_config("sg2-tiny", resolution=32), seed=0)
    before = {name: value.clone() for name, value in plain.state_dict().items()}
    probe.calibrate_magnitudes(plain, batches=2)
    assert all(torch.equal(before[name], value) for name, value in plain.state_dict().items())


def test_the_detail_term_reads_fine_structure_only(load_benchmark):
    probe = load_benchmark("generator_capacity_probe")
    flat = torch.full((1, 3, 16, 16), 0.4)
    assert torch.allclose(probe.high_pass(flat), torch.zeros_like(flat), atol=1e-6)
    line = flat.clone()
    line[:, :, 8, :] = 0.9  # a one-pixel bright line: detail the box mean spreads out
    detail = probe.high_pass(line)
    assert float(detail[0, 0, 8, 8]) > 0.3 and abs(float(detail[0, 0, 2, 8])) < 1e-6  # far from the line: none
    generator = StyleGenerator(get_config("sg2-tiny", resolution=32), seed=0)
    targets = torch.rand(2, 3, 32, 32)
    assert probe.fit(generator, targets, 2, 0.01, detail_weight=10.0).shape == targets.shape
