"""Checkpoints for resumable training: one atomic file holding every state needed to continue identically.

A training loop saves ``{"step": ..., "model": ..., "optimizer": ..., "rng": capture_rng_state(), ...}`` every
so often with :func:`save_checkpoint`; after an interruption :func:`load_checkpoint` returns it and
:func:`anonpaper.runtime.restore_rng_state` puts the random generators back, so the resumed run continues as if
never stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from anonpaper.cache import atomic_torch_save


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Atomically write ``state`` (tensors, state dicts, numbers) to ``path``; returns the path."""
    path = Path(path)
    atomic_torch_save(state, path)
    return path


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any] | None:
    """Load a checkpoint written by :func:`save_checkpoint`; None when ``path`` does not exist.

    Raises:
        ValueError: If the file exists but cannot be read as a checkpoint (names the file).
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as error:  # torch raises several types for corrupt files
        raise ValueError(f"checkpoint {path} is unreadable ({type(error).__name__}: {error}); delete it to restart")
