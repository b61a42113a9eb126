"""Data manifests: one YAML per real dataset (what it is, where to get it, its layout, labels and split protocols).

The folder is found, in order, from ``$ANONPAPER_PROJECT_ROOT/data_manifests``, from package data
(``anonpaper/data/_manifests`` if the package was built with them) and from the source tree the package was
imported from (``<repo>/data_manifests``). The schema is documented in ``data_manifests/README.md``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from anonpaper.data.cohort import MODALITIES

REQUIRED_KEYS: dict[str, type] = {
    "name": str, "title": str, "modality": str, "description": str, "citation": str, "homepage": str,
    "licence": str, "access": dict, "layout": dict, "label_files": list, "image": dict, "label_mapping": dict,
    "split_protocols": dict, "default_protocol": str, "loader": str,
}
ACCESS_KEYS = ("credentialed", "conditions")


@dataclass(frozen=True)
class Manifest:
    """A validated data manifest; fields mirror the YAML keys (see data_manifests/README.md)."""

    name: str
    title: str
    modality: str
    description: str
    citation: str
    homepage: str
    licence: str
    access: dict
    layout: dict
    label_files: list
    image: dict
    label_mapping: dict
    split_protocols: dict
    default_protocol: str
    loader: str
    notes: str = ""
    path: Path | None = None
    extra: dict = field(default_factory=dict)

    def label_file(self, key: str) -> dict:
        """The label-file entry with ``key`` (KeyError lists the keys)."""
        for entry in self.label_files:
            if entry["key"] == key:
                return entry
        raise KeyError(f"manifest {self.name!r} has no label file {key!r}; has {[e['key'] for e in self.label_files]}")


def manifests_dir() -> Path:
    """The folder holding the manifest YAML files (see the module docstring for the search order)."""
    candidates = []
    if os.environ.get("ANONPAPER_PROJECT_ROOT"):
        candidates.append(Path(os.environ["ANONPAPER_PROJECT_ROOT"]) / "data_manifests")
    package_dir = Path(__file__).resolve().parent
    candidates.append(package_dir / "_manifests")
    candidates.extend(parent / "data_manifests" for parent in package_dir.parents)
    for candidate in candidates:
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise FileNotFoundError("no data_manifests folder found; set ANONPAPER_PROJECT_ROOT to the project root "
                            f"(looked in {[str(c) for c in candidates[:4]]} ...)")


def available_manifests() -> list[str]:
    """Names of all manifests (file stems)."""
    return sorted(path.stem for path in manifests_dir().glob("*.yaml"))


def validate_manifest(data: dict, source: str = "manifest") -> None:
    """Check a manifest dict against the schema; ValueError names the file, the key and expected vs found."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: top level must be a mapping, got {type(data).__name__}")
    for key, kind in REQUIRED_KEYS.items():
        if key not in data:
            raise ValueError(f"{source}: missing required key {key!r}")
        if not isinstance(data[key], kind):
            raise ValueError(f"{source}: key {key!r} must be {kind.__name__}, got {type(data[key]).__name__}")
    if data["modality"] not in MODALITIES:
        raise ValueError(f"{source}: modality must be one of {MODALITIES}, got {data['modality']!r}")
    for key in ACCESS_KEYS:
        if key not in data["access"]:
            raise ValueError(f"{source}: access lacks {key!r}")
    if not isinstance(data["access"]["credentialed"], bool):
        raise ValueError(f"{source}: access.credentialed must be true/false")
    for position, entry in enumerate(data["label_files"]):
        if not isinstance(entry, dict) or "key" not in entry or "path" not in entry:
            raise ValueError(f"{source}: label_files[{position}] needs 'key' and 'path', got {entry!r}")
        if not isinstance(entry.get("columns", []), list):
            raise ValueError(f"{source}: label_files[{position}].columns must be a list")
    if data["image"].get("channels") not in (1, 3):
        raise ValueError(f"{source}: image.channels must be 1 or 3, got {data['image'].get('channels')!r}")
    if not data["split_protocols"]:
        raise ValueError(f"{source}: split_protocols is empty")
    for name, protocol in data["split_protocols"].items():
        if not isinstance(protocol, dict) or "kind" not in protocol:
            raise ValueError(f"{source}: split protocol {name!r} needs a 'kind'")
    if data["default_protocol"] not in data["split_protocols"]:
        raise ValueError(f"{source}: default_protocol {data['default_protocol']!r} not in "
                         f"{sorted(data['split_protocols'])}")
    if ":" not in data["loader"]:
        raise ValueError(f"{source}: loader must look like 'module:function', got {data['loader']!r}")


@lru_cache(maxsize=None)
def _load(path: Path) -> Manifest:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    validate_manifest(data, str(path))
    if data["name"] != path.stem:
        raise ValueError(f"{path}: name {data['name']!r} differs from the file name {path.stem!r}")
    known = set(REQUIRED_KEYS) | {"notes"}
    return Manifest(**{key: data[key] for key in REQUIRED_KEYS}, notes=str(data.get("notes", "")), path=path,
                    extra={key: value for key, value in data.items() if key not in known})


def load_manifest(name: str) -> Manifest:
    """Load and validate ``data_manifests/<name>.yaml``.

    Raises:
        ValueError: Unknown name (listing the known ones) or a manifest that breaks the schema.
    """
    folder = manifests_dir()
    path = folder / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"no data manifest {name!r}; known: {', '.join(available_manifests())}")
    return _load(path.resolve())
