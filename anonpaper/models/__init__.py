"""Networks (no training code: that lives in :mod:`anonpaper.train`).

Segmenters (:class:`UNet` with feature taps, :class:`FRUNet`), classifiers (timm ResNet-D family via
:func:`build_classifier`, :class:`SmallCNN`), the identity embedding (:class:`EmbeddingNet` with an ArcFace head),
the learned keypoint detector (:class:`KeypointNet`), input normalisation, and StyleGAN2 / StyleGAN3-T with
S-space in :mod:`anonpaper.models.stylegan`.
"""

from anonpaper.models.classifiers import FocalLoss, SmallCNN, build_classifier, grad_cam, gradient_saliency
from anonpaper.models.embedding import ArcFaceHead, EmbeddingNet
from anonpaper.models.frunet import FRUNet
from anonpaper.models.keypoints import KeypointNet, detect, fs_sr
from anonpaper.models.normalization import InputNormalization, channel_statistics
from anonpaper.models.unet import UNet

__all__ = ["ArcFaceHead", "EmbeddingNet", "FRUNet", "FocalLoss", "InputNormalization", "KeypointNet", "SmallCNN",
           "UNet", "build_classifier", "channel_statistics", "detect", "fs_sr", "grad_cam", "gradient_saliency"]
