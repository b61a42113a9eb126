"""Anonymization methods. One registry serves every caller: ``get(name, **options)`` returns a callable
:class:`ImageAnonymizer` (uint8 ``(N, H, W, C)`` in and out) used by the chapters, the folder writer and the CLI.

Modules: :mod:`.registry` (the registry and adapter), :mod:`.jacobian_edit` (Jacobian contribution scores and the
S-space edit, paper 1), :mod:`.sspace_baselines` (StyleSpace, LowRankGAN, ReSeFa), :mod:`.snow` (Snow and VS-Snow,
paper 2), :mod:`.gmia` (latent optimisation, paper 3), :mod:`.ksalsa` (k-anonymous clustering, centroids and local
style alignment, paper 4; and k-same pixel averaging), :mod:`.baselines` (the trivial baselines: blur, pixelation,
noise, a constant image; blur and pixelation at a matched PSNR), :mod:`.folder` (apply a method to a folder of
images, writing the release's pairing and parameters beside it).
"""

from anonpaper.methods.folder import anonymize_folder
from anonpaper.methods.registry import ImageAnonymizer, MethodSpec, available, get, register, spec
from anonpaper.methods.snow import Snow, VSSnow, channel_mean, snow, vs_snow

__all__ = ["ImageAnonymizer", "MethodSpec", "Snow", "VSSnow", "anonymize_folder", "available", "channel_mean", "get",
           "register", "snow", "spec", "vs_snow"]
