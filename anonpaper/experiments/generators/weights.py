"""Shipped generator weights: ``weights/<kind>.pt`` (the EMA generator's state dict in float16) and
``weights/<kind>.json`` (StyleGAN config, kimg, seed, commit, metrics, data description and the file's SHA-256).

:func:`export_weights` writes the pair (a GPU session trains at ``paper`` and exports; the ``quick`` profile then
loads instead of training on the CPU; ``anonpaper generators train KIND`` exports with its training curve and data
population). :func:`load_weights` (a folder and a kind) and :func:`read_weights` (one file) refuse, with
:class:`WeightsRefused` naming the file and the mismatch, a pair whose hash, format, kind, StyleGAN config, channels
or resolution do not match what the caller asks for, and a file that is truncated or does not load.

Example (after a trained run)::

    from anonpaper.experiments import generators
    generators.export_weights(generator, "weights", kind="fundus-sg3t", kimg=5000, seed=0, metrics={...})
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from anonpaper.cache import atomic_write_bytes, file_sha256
from anonpaper.models.stylegan import StyleGANConfig, StyleGenerator
from anonpaper.runtime import git_sha

WEIGHTS_FORMAT = "anonpaper.generator-weights/1"


class WeightsRefused(ValueError):
    """A shipped weights file that does not verify or does not match the requested generator."""


class WeightsForAnotherConfig(WeightsRefused):
    """A shipped weights file that verifies but holds another generator config (channels, resolution or widths)
    than the one asked for: a chapter at another profile does not use it and trains (or loads) its own."""


def weights_paths(directory: str | Path, kind: str) -> tuple[Path, Path]:
    """The weights file and its JSON description for generator ``kind`` in ``directory``."""
    directory = Path(directory)
    return directory / f"{kind}.pt", directory / f"{kind}.json"


sha256_of = file_sha256  # hex SHA-256 of a file's bytes (the name this module has always exported)


def description_path(weights: str | Path) -> Path:
    """The JSON description beside a weights file (``<kind>.pt`` -> ``<kind>.json``)."""
    return Path(weights).with_suffix(".json")


RECORD_FIELDS = ("format", "kind", "stylegan_config", "kimg", "seed", "commit", "metrics", "data", "sha256", "dtype")


def export_weights(generator: StyleGenerator, directory: str | Path, *, kind: str, kimg: float, seed: int,
                   metrics: dict[str, float] | None = None, data: Any = None,
                   provenance: dict[str, Any] | None = None) -> Path:
    """Write a trained generator's weights (float16) and their description into ``directory``.

    Args:
        generator: The generator to ship (its EMA copy).
        directory: Target folder, e.g. the project's ``weights/``.
        kind: Generator kind (``"fundus-sg3t"``, ``"fundus-sg2"``, ``"cxr-sg2"``).
        kimg: Thousands of real images it was trained on.
        seed: Training seed.
        metrics: Its evaluation numbers (name -> value), recorded in the JSON.
        data: Description of its training data (recorded; ``data["dataset"]`` names the cohort it learned).
        provenance: Further records under their own keys (e.g. ``training``: the recipe, ``curve``: the metrics per
            evaluated kimg, ``job``: how to train it again); they must not reuse :data:`RECORD_FIELDS`.

    Returns:
        The path of the ``.pt`` file.
    """
    clashes = sorted(set(provenance or {}) & set(RECORD_FIELDS))
    if clashes:
        raise ValueError(f"provenance keys {clashes} clash with the weights record's own fields {RECORD_FIELDS}")
    weights, description = weights_paths(directory, kind)
    state = {key: (value.detach().cpu().half() if value.is_floating_point() else value.detach().cpu())
             for key, value in generator.state_dict().items()}
    buffer = io.BytesIO()
    torch.save({"format": WEIGHTS_FORMAT, "state_dict": state}, buffer)
    atomic_write_bytes(weights, buffer.getvalue())
    record = {"format": WEIGHTS_FORMAT, "kind": kind, "stylegan_config": generator.config.to_dict(),
              "kimg": float(kimg), "seed": int(seed), "commit": git_sha(), "metrics": dict(metrics or {}),
              "data": data, "sha256": sha256_of(weights), "dtype": "float16", **(provenance or {})}
    atomic_write_bytes(description, (json.dumps(record, indent=2, sort_keys=True, default=str) + "\n").encode())
    return weights


def _differences(expected: dict, found: dict) -> list[str]:
    return [f"{name}: expected {expected[name]!r}, file has {found.get(name)!r}"
            for name in expected if name != "description" and found.get(name) != expected[name]]


def load_weights(directory: str | Path, kind: str, expected: StyleGANConfig,
                 device: str | torch.device = "cpu") -> tuple[StyleGenerator, dict] | None:
    """The shipped generator ``kind`` from ``directory`` if there is one; None when there is no file.

    See :func:`read_weights` for the checks.

    Returns:
        ``(generator in eval mode, float32, on device; the JSON record)`` or None.

    Raises:
        WeightsRefused: Naming the file and the mismatch (hash, format, kind, config field, channels, resolution,
            tensor shapes), or the missing half of the pair.
    """
    weights, description = weights_paths(directory, kind)
    if not weights.exists() and not description.exists():
        return None
    return read_weights(weights, kind, expected, device)


def read_weights(weights: str | Path, kind: str, expected: StyleGANConfig | None = None,
                 device: str | torch.device = "cpu") -> tuple[StyleGenerator, dict]:
    """A generator from one weights file and the JSON description beside it, verified.

    The file's SHA-256 must equal the JSON's (a truncated or altered file does not), the JSON must describe a
    generator of ``kind``, its StyleGAN config must equal ``expected`` (channels and resolution included; None:
    the recorded config is used, as when sampling from a given file), and the state dict must fit the architecture.

    Returns:
        ``(generator in eval mode, float32, on device; the JSON record)``.

    Raises:
        WeightsRefused: Naming the file and what differs.
    """
    weights = Path(weights)
    description = description_path(weights)
    if not weights.exists() or not description.exists():
        missing = weights if not weights.exists() else description
        raise WeightsRefused(f"shipped weights for {kind!r}: {missing} is missing (both {weights.name} and "
                             f"{description.name} are needed)")
    try:
        record = json.loads(description.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise WeightsRefused(f"{description}: unreadable description ({error})") from error
    if not isinstance(record, dict) or record.get("format") != WEIGHTS_FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise WeightsRefused(f"{description}: format {found!r}, expected {WEIGHTS_FORMAT!r}")
    if record.get("kind") != kind:
        raise WeightsRefused(f"{description}: describes a {record.get('kind')!r} generator, not {kind!r}")
    actual = sha256_of(weights)
    if actual != record.get("sha256"):
        raise WeightsRefused(f"{weights}: SHA-256 {actual} does not match {record.get('sha256')!r} in "
                             f"{description.name} (corrupt, truncated or replaced file)")
    found = record.get("stylegan_config") or {}
    if expected is None:
        try:
            expected = StyleGANConfig(**found)
        except (TypeError, ValueError) as error:
            raise WeightsRefused(f"{description}: its StyleGAN config does not build ({error})") from error
    if found.get("image_channels") != expected.image_channels:
        raise WeightsForAnotherConfig(f"{weights}: {found.get('image_channels')} image channels, the chapter asks for "
                             f"{expected.image_channels}")
    if found.get("resolution") != expected.resolution:
        raise WeightsForAnotherConfig(f"{weights}: resolution {found.get('resolution')} px, the chapter asks for "
                                      f"{expected.resolution} px")
    differences = _differences(expected.to_dict(), found)
    if differences:
        raise WeightsForAnotherConfig(f"{weights}: StyleGAN config does not match ({'; '.join(differences)})")
    try:
        payload = torch.load(weights, map_location="cpu", weights_only=True)
        generator = StyleGenerator(expected, seed=0)
        generator.load_state_dict({key: value.float() if value.is_floating_point() else value
                                   for key, value in payload["state_dict"].items()})
    except Exception as error:  # torch raises several types for unreadable or misfitting files
        raise WeightsRefused(f"{weights}: does not load into {expected.description or 'the generator'} "
                             f"({type(error).__name__}: {error})") from error
    return generator.to(device).eval(), record
