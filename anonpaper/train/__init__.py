"""Shared training loops (classifier, segmenter, GAN) with checkpoint + resume and progress bars."""
