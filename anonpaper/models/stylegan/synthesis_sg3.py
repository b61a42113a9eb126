"""StyleGAN3-T synthesis network (Karras et al. 2021, "alias-free", translation-equivariant config), pure PyTorch.

* Input: Fourier features with per-channel random frequencies inside a band, whose rotation/translation is
  predicted from the first w by an affine layer initialised to the identity transform (Sec. 3.1, Appendix F).
* ``num_layers`` modulated 3x3 conv layers, each followed by a *filtered* leaky ReLU: upsample x2 (relative to the
  higher of the in/out sampling rates) with a Kaiser low-pass filter, apply the nonlinearity at the higher rate,
  low-pass and downsample to the output rate (Sec. 3.2). Cutoffs grow geometrically from ``first_cutoff`` to
  ``resolution / 2``; the last ``num_critical`` layers are critically sampled. Feature maps carry a margin of
  ``margin_size`` pixels that the last two layers crop away.
* Activations are normalised by a running estimate of their magnitude (``magnitude_ema``), updated only when
  ``update_emas=True`` (the discriminator pass in training), so inference is deterministic.
* A final 1x1 ToRGB layer without demodulation; output scaled by ``output_scale`` (0.25).

There are no noise inputs. ``num_ws = num_layers + 2``: ws[0] drives the input transform, ws[1 + i] layer i.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from anonpaper.models.stylegan.config import StyleGANConfig
from anonpaper.models.stylegan import ops
from anonpaper.models.stylegan.layers import (EqualizedLinear, LEAKY_RELU_GAIN, LEAKY_RELU_SLOPE,
                                              demodulation_coefficients, design_lowpass_filter, modulated_conv2d)
from anonpaper.models.stylegan.synthesis_sg2 import reduced_precision_dtype
from anonpaper.models.stylegan.sspace import StyleCodes, StyleLayout


def sg3_layer_schedule(config: StyleGANConfig) -> dict[str, np.ndarray]:
    """Per-layer cutoffs, stopbands, sampling rates, half-widths, sizes and channels (StyleGAN3 Appendix F).

    Returns:
        Dict of float64 arrays of length ``sg3_num_layers + 1`` (the last entry is ToRGB).
    """
    layers, critical = config.sg3_num_layers, config.sg3_num_critical
    last_cutoff = config.resolution / 2
    last_stopband = last_cutoff * config.sg3_last_stopband_relative
    exponents = np.minimum(np.arange(layers + 1) / (layers - critical), 1.0)
    cutoffs = config.sg3_first_cutoff * (last_cutoff / config.sg3_first_cutoff) ** exponents
    stopbands = config.sg3_first_stopband * (last_stopband / config.sg3_first_stopband) ** exponents
    sampling_rates = np.exp2(np.ceil(np.log2(np.minimum(stopbands * 2, config.resolution))))
    half_widths = np.maximum(stopbands, sampling_rates / 2) - cutoffs
    sizes = sampling_rates + config.sg3_margin_size * 2
    sizes[-2:] = config.resolution
    channels = np.rint(np.minimum((config.channel_base / 2) / cutoffs, config.channel_max))
    channels[-1] = config.image_channels
    return {"cutoffs": cutoffs, "stopbands": stopbands, "sampling_rates": sampling_rates,
            "half_widths": half_widths, "sizes": sizes, "channels": channels}


class FourierInput(nn.Module):
    """Fourier-feature input whose rotation/translation comes from w (not a style: its 4 numbers are geometry)."""

    def __init__(self, w_dim: int, channels: int, size: int, sampling_rate: float, bandwidth: float):
        super().__init__()
        self.channels, self.size, self.sampling_rate, self.bandwidth = channels, size, sampling_rate, bandwidth
        frequencies = torch.randn(channels, 2)
        radii = frequencies.square().sum(dim=1, keepdim=True).sqrt()
        # Spread frequencies roughly uniformly over the disc of radius `bandwidth` (official recipe).
        frequencies = frequencies / (radii * radii.square().exp().pow(0.25)) * bandwidth
        self.register_buffer("frequencies", frequencies)
        self.register_buffer("phases", torch.rand(channels) - 0.5)
        self.weight = nn.Parameter(torch.randn(channels, channels))
        # Outputs (cos, sin, tx, ty) up to scale; starts at the identity transform for every w.
        self.affine = EqualizedLinear(w_dim, 4, weight_init_scale=0.0)
        with torch.no_grad():
            self.affine.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))
        self.register_buffer("user_transform", torch.eye(3))
        theta = torch.eye(2, 3) * (0.5 * size / sampling_rate)
        grid = F.affine_grid(theta.unsqueeze(0), [1, 1, size, size], align_corners=False)
        self.register_buffer("grid", grid)  # (1, size, size, 2) sample positions in input-frequency units

    def forward_from_transform(self, transform: torch.Tensor) -> torch.Tensor:
        """Features (N, channels, size, size) for transform parameters (N, 4).

        Always computed in float32 (autocast disabled): sines of large phase arguments are meaningless in 16 bits.
        """
        with torch.autocast(device_type=transform.device.type, enabled=False):
            return self._fourier_features(transform if transform.dtype == torch.float64 else transform.float())

    def _fourier_features(self, transform: torch.Tensor) -> torch.Tensor:
        batch = transform.shape[0]
        t = transform / transform[:, :2].norm(dim=1, keepdim=True)
        rotation = torch.eye(3, device=t.device, dtype=t.dtype).repeat(batch, 1, 1)
        rotation[:, 0, 0], rotation[:, 0, 1], rotation[:, 1, 0], rotation[:, 1, 1] = t[:, 0], -t[:, 1], t[:, 1], t[:, 0]
        translation = torch.eye(3, device=t.device, dtype=t.dtype).repeat(batch, 1, 1)
        translation[:, 0, 2], translation[:, 1, 2] = -t[:, 2], -t[:, 3]
        transforms = rotation @ translation @ self.user_transform.to(t.dtype).unsqueeze(0)
        phases = self.phases.unsqueeze(0) + (self.frequencies.unsqueeze(0) @ transforms[:, :2, 2:]).squeeze(2)
        frequencies = self.frequencies.unsqueeze(0) @ transforms[:, :2, :2]  # (N, C, 2)
        # Fade out frequencies that the transform pushed above the band (prevents aliasing at the input).
        amplitudes = (1 - (frequencies.norm(dim=2) - self.bandwidth) / (self.sampling_rate / 2 - self.bandwidth))
        amplitudes = amplitudes.clamp(0, 1)
        x = torch.einsum("hwd,ncd->nhwc", self.grid[0].to(t.dtype), frequencies)
        x = x + phases[:, None, None, :]
        x = torch.sin(x * (2 * math.pi)) * amplitudes[:, None, None, :]
        x = x @ (self.weight.to(x.dtype) / math.sqrt(self.channels)).t()
        return x.permute(0, 3, 1, 2)


class AliasFreeLayer(nn.Module):
    """Modulated conv followed by the filtered (up -> leaky ReLU -> down) nonlinearity of StyleGAN3.

    ``implementation`` selects the ops (see :mod:`anonpaper.models.stylegan.ops`); ``compute_dtype`` (None: the
    input's dtype) and ``clamp`` implement mixed precision.
    """

    def __init__(self, w_dim: int, is_torgb: bool, in_channels: int, out_channels: int, in_size: int, out_size: int,
                 in_sampling_rate: float, out_sampling_rate: float, in_cutoff: float, out_cutoff: float,
                 in_half_width: float, out_half_width: float, filter_size: int = 6, lrelu_upsampling: int = 2,
                 magnitude_ema_beta: float = 0.999, implementation: str = "auto",
                 compute_dtype: torch.dtype | None = None, clamp: float | None = None):
        super().__init__()
        self.implementation = ops.check_implementation(implementation)
        self.compute_dtype, self.clamp = compute_dtype, clamp
        self.is_torgb, self.in_channels, self.out_channels = is_torgb, in_channels, out_channels
        self.in_size, self.out_size = in_size, out_size
        self.conv_kernel = 1 if is_torgb else 3
        self.magnitude_ema_beta = magnitude_ema_beta
        self.affine = EqualizedLinear(w_dim, in_channels, bias_init=1.0)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, self.conv_kernel, self.conv_kernel))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.register_buffer("magnitude_ema", torch.ones([]))
        temporary_rate = max(in_sampling_rate, out_sampling_rate) * (1 if is_torgb else lrelu_upsampling)
        self.up_factor = int(round(temporary_rate / in_sampling_rate))
        up_taps = filter_size * self.up_factor if self.up_factor > 1 and not is_torgb else 1
        up_filter = design_lowpass_filter(up_taps, in_cutoff, in_half_width * 2, temporary_rate)
        self.down_factor = int(round(temporary_rate / out_sampling_rate))
        down_taps = filter_size * self.down_factor if self.down_factor > 1 and not is_torgb else 1
        down_filter = design_lowpass_filter(down_taps, out_cutoff, out_half_width * 2, temporary_rate)
        self.register_buffer("up_filter", up_filter if up_filter is not None else torch.ones(1))
        self.register_buffer("down_filter", down_filter if down_filter is not None else torch.ones(1))
        # Padding so that the output has exactly out_size pixels (official formula).
        pad_total = (out_size - 1) * self.down_factor + 1
        pad_total -= (in_size + self.conv_kernel - 1) * self.up_factor
        pad_total += up_taps + down_taps - 2
        pad_lo = (pad_total + self.up_factor) // 2
        self.padding = (int(pad_lo), int(pad_total - pad_lo)) * 2

    def forward_from_style(self, x: torch.Tensor, style: torch.Tensor, update_emas: bool = False) -> torch.Tensor:
        if update_emas:
            with torch.no_grad():
                magnitude = x.detach().float().square().mean()
                self.magnitude_ema.copy_(magnitude.lerp(self.magnitude_ema, self.magnitude_ema_beta))
        if self.compute_dtype is not None:
            x = x.to(self.compute_dtype)
        implementation = ops.resolve_implementation(self.implementation, x)
        input_gain = self.magnitude_ema.rsqrt()
        if self.is_torgb:
            style = style * (1.0 / math.sqrt(self.in_channels * self.conv_kernel ** 2))
        if implementation == "reference":
            x = modulated_conv2d(x, self.weight, style, demodulate=not self.is_torgb, padding=self.conv_kernel - 1,
                                 input_gain=input_gain, prenormalize=True)
            if self.is_torgb:
                x = ops.bias_act(x, self.bias, "linear", clamp=self.clamp, implementation=implementation)
                x = upfirdn2d_or_identity(x, self.up_filter, self.down_filter, self.up_factor, self.down_factor,
                                          self.padding, implementation)
            else:
                x = ops.filtered_lrelu(x, self.up_filter, self.down_filter, self.bias, self.up_factor,
                                       self.down_factor, self.padding, clamp=self.clamp,
                                       implementation=implementation)
        elif self.is_torgb:
            # modulated_conv2d without demodulation, keeping only x for backward (not x * style).
            x = ops.scaled_input_conv2d(x, (style * input_gain).to(x.dtype), self.weight.to(x.dtype))
            x = ops.bias_act(x, self.bias, "linear", clamp=self.clamp, implementation=implementation)
            x = upfirdn2d_or_identity(x, self.up_filter, self.down_filter, self.up_factor, self.down_factor,
                                      self.padding, implementation)
        else:
            # Pre-normalisation and demodulation as in modulated_conv2d. What autograd keeps for backward is what
            # bounds the batch on a GPU: the convolution keeps x (not x * style), and the demodulation and bias
            # ride into the filtered nonlinearity, which keeps only the conv output (not the upsampled tensor).
            weight = self.weight * self.weight.square().mean(dim=[1, 2, 3], keepdim=True).rsqrt()
            style = style * style.square().mean(dim=1, keepdim=True).rsqrt()
            y = ops.scaled_input_conv2d(x, (style * input_gain).to(x.dtype), weight.to(x.dtype),
                                        padding=self.conv_kernel - 1)
            x = ops.filtered_lrelu(y, self.up_filter, self.down_filter, self.bias, self.up_factor, self.down_factor,
                                   self.padding, clamp=self.clamp, scale=demodulation_coefficients(weight, style),
                                   implementation=implementation)
        if x.shape[-1] != self.out_size:
            raise AssertionError(f"alias-free layer produced {x.shape[-1]} px, expected {self.out_size}")
        return x if self.compute_dtype is None or not self.is_torgb else x.float()


def upfirdn2d_or_identity(x: torch.Tensor, up_filter: torch.Tensor, down_filter: torch.Tensor, up: int, down: int,
                          padding: tuple[int, int, int, int], implementation: str) -> torch.Tensor:
    """The ToRGB layer's resampling: the identity when it neither resamples nor pads (always, in StyleGAN3-T)."""
    if up == 1 and down == 1 and up_filter.numel() == 1 and down_filter.numel() == 1 and not any(padding):
        return x
    x = ops.upfirdn2d(x, up_filter, up=up, padding=padding, gain=up ** 2, implementation=implementation)
    return ops.upfirdn2d(x, down_filter, down=down, implementation=implementation)


class SynthesisNetworkSG3T(nn.Module):
    """StyleGAN3-T synthesis: ws (N, num_layers + 2, w_dim) -> images (N, C, R, R), nominally in [-1, 1].

    Args:
        config: Architecture (``architecture == "sg3t"``).
        implementation: Ops implementation (see :mod:`anonpaper.models.stylegan.ops`).
        mixed_precision: None (float32, default), ``"fp16"`` or ``"bf16"`` for the layers whose output sampling
            rate times ``2 ** mixed_precision_resolutions`` exceeds the resolution (StyleGAN3's rule with 4), with
            activations clamped to ``[-conv_clamp, conv_clamp]``; the image is float32.
        mixed_precision_resolutions: See above.
        conv_clamp: Activation clamp of the reduced-precision layers (256).
    """

    def __init__(self, config: StyleGANConfig, implementation: str = "auto", mixed_precision: str | None = None,
                 mixed_precision_resolutions: int = 4, conv_clamp: float = 256.0):
        super().__init__()
        self.implementation = ops.check_implementation(implementation)
        reduced = reduced_precision_dtype(mixed_precision)
        if config.architecture != "sg3t":
            raise ValueError(f"SynthesisNetworkSG3T needs architecture 'sg3t', got {config.architecture!r}")
        self.config = config
        self.resolution, self.image_channels, self.w_dim = config.resolution, config.image_channels, config.w_dim
        self.output_scale = config.sg3_output_scale
        schedule = sg3_layer_schedule(config)
        self.schedule = schedule
        channels, sizes = schedule["channels"].astype(int), schedule["sizes"].astype(int)
        rates, cutoffs, half_widths = schedule["sampling_rates"], schedule["cutoffs"], schedule["half_widths"]
        self.input = FourierInput(self.w_dim, int(channels[0]), int(sizes[0]), float(rates[0]), float(cutoffs[0]))
        self.layers = nn.ModuleDict()
        num_layers = config.sg3_num_layers
        for index in range(num_layers + 1):
            previous = max(index - 1, 0)
            name = "torgb" if index == num_layers else f"L{index}"
            reduced_here = reduced is not None and rates[index] * 2 ** mixed_precision_resolutions > config.resolution
            dtype = reduced if reduced_here else None
            self.layers[name] = AliasFreeLayer(
                self.w_dim, is_torgb=index == num_layers, in_channels=int(channels[previous]),
                out_channels=int(channels[index]), in_size=int(sizes[previous]), out_size=int(sizes[index]),
                in_sampling_rate=float(rates[previous]), out_sampling_rate=float(rates[index]),
                in_cutoff=float(cutoffs[previous]), out_cutoff=float(cutoffs[index]),
                in_half_width=float(half_widths[previous]), out_half_width=float(half_widths[index]),
                filter_size=config.sg3_filter_size, magnitude_ema_beta=config.sg3_magnitude_ema_beta,
                implementation=implementation, compute_dtype=dtype, clamp=conv_clamp if dtype is not None else None)
        self.num_ws = num_layers + 2

    @property
    def layout(self) -> StyleLayout:
        return StyleLayout(tuple(self.layers), tuple(layer.in_channels for layer in self.layers.values()))

    def set_implementation(self, implementation: str) -> None:
        """Switch every layer to another ops implementation (weights unchanged)."""
        self.implementation = ops.check_implementation(implementation)
        for layer in self.layers.values():
            layer.implementation = implementation

    def noise_buffers(self) -> "OrderedDict[str, torch.Tensor]":
        """StyleGAN3 has no noise inputs: always empty."""
        return OrderedDict()

    def _check_ws(self, ws: torch.Tensor) -> None:
        if ws.ndim != 3 or ws.shape[1] != self.num_ws or ws.shape[2] != self.w_dim:
            raise ValueError(f"ws must have shape (N, {self.num_ws}, {self.w_dim}), got {tuple(ws.shape)}")

    def styles(self, ws: torch.Tensor) -> StyleCodes:
        """S codes for ws: every layer's affine output plus the input transform (from ws[:, 0])."""
        self._check_ws(ws)
        styles = OrderedDict((name, layer.affine(ws[:, 1 + i])) for i, (name, layer) in enumerate(self.layers.items()))
        return StyleCodes(styles, input_transform=self.input.affine(ws[:, 0]))

    def forward(self, ws: torch.Tensor, update_emas: bool = False, return_features: bool = False, **_):
        """Synthesise from ws, computing each layer's style on the fly (same ops as :meth:`forward_from_styles`)."""
        self._check_ws(ws)
        names = list(self.layers)
        return self._run(lambda name, layer: layer.affine(ws[:, 1 + names.index(name)]),
                         self.input.affine(ws[:, 0]), update_emas, return_features)

    def forward_from_styles(self, codes: StyleCodes, update_emas: bool = False, return_features: bool = False, **_):
        """Synthesise from S codes; ``codes.input_transform`` (N, 4) is required."""
        if codes.layout != self.layout:
            raise ValueError(f"style codes layout {list(zip(codes.layout.names, codes.layout.sizes))} does not "
                             f"match the generator's {list(zip(self.layout.names, self.layout.sizes))}")
        if codes.input_transform is None or codes.input_transform.shape != (codes.batch_size, 4):
            raise ValueError(f"StyleGAN3 codes need input_transform of shape ({codes.batch_size}, 4), got "
                             f"{None if codes.input_transform is None else tuple(codes.input_transform.shape)}")
        return self._run(lambda name, layer: codes.styles[name], codes.input_transform, update_emas,
                         return_features)

    def _run(self, style_of: Callable, transform: torch.Tensor, update_emas: bool, return_features: bool):
        x = self.input.forward_from_transform(transform)
        features = [("input", x)] if return_features else []
        for name, layer in self.layers.items():
            x = layer.forward_from_style(x, style_of(name, layer), update_emas=update_emas)
            if return_features:
                features.append((name, x))
        image = x * self.output_scale
        return (image, features) if return_features else image
