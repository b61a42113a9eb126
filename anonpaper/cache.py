"""Content-addressed artifact cache, so a network trained in one notebook is reused by the next.

Keys are hashes of everything that determines the artifact (configuration, data description, seed, and by default
the source of the code that can change it), so a change to any of them trains afresh. That code is the import
closure of the module that opens the cache (:func:`anonpaper.runtime.import_closure`): editing one chapter never
retrains what another chapter cached (the GAN chapters share the generators chapter's generators), nor does editing
a chapter's figures or claims retrain its networks (a package ``__init__`` that only runs, as a parent, adds its own
file but not what it re-exports), while editing a trainer retrains everything it trained. Writes are atomic
(temporary file then ``os.replace``), so an interrupted run never leaves a half-written artifact that a later run
would trust.

Example:
    >>> import tempfile, os
    >>> os.environ["ANONPAPER_CACHE"] = tempfile.mkdtemp()
    >>> cache = ArtifactCache("doctest")
    >>> cache.get_or_create({"n": 3}, lambda: {"value": 3 * 2}, include_source=False)
    {'value': 6}
    >>> cache.exists({"n": 3}, include_source=False)
    True
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from anonpaper.runtime import (LOWER_LAYERS, cache_dir, content_hash, import_closure, isolated_rng, module_files,
                               package_source_hash)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a reader sees the old file or the whole new one, never a part)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        # mkstemp creates the file readable by its owner only; a written record, notebook or weights file gets the
        # mode an ordinary open() would give it (0666 less the umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in blocks (memory stays flat for large files)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` with the atomicity of :func:`atomic_write_bytes`."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(Path(path), buffer.getvalue())


def source_parts_of(owner: str) -> tuple[str, ...]:
    """Package-relative source files that key the artifacts built by module ``owner``: its import closure, or
    :data:`~anonpaper.runtime.LOWER_LAYERS` when ``owner`` is not a package module (a test, a notebook).

    Example:
        >>> "experiments/generators/pipeline.py" in source_parts_of("anonpaper.experiments.generators.pipeline")
        True
        >>> "methods/gmia.py" in source_parts_of("anonpaper.experiments.generators.pipeline")  # another method
        False
        >>> source_parts_of("__main__") == LOWER_LAYERS
        True
    """
    files = module_files(import_closure(owner)) if owner.startswith("anonpaper.") else ()
    return files or LOWER_LAYERS


class ArtifactCache:
    """A namespace of cached artifacts (torch-serialisable objects) under ``$ANONPAPER_CACHE/<namespace>/``.

    Args:
        namespace: Folder name for one kind of artifact, e.g. ``"vessel-segmenter"``.
        root: Cache root; defaults to :func:`anonpaper.runtime.cache_dir`.
        owner: Dotted name of the module that builds the artifacts (default: the module that opens the cache);
            the source of its import closure keys the artifacts.
    """

    def __init__(self, namespace: str, root: Path | None = None, owner: str | None = None):
        if not namespace or "/" in namespace or namespace.startswith("."):
            raise ValueError(f"namespace must be a plain folder name, got {namespace!r}")
        self.namespace = namespace
        self.directory = Path(root or cache_dir()) / namespace
        owner = owner if owner is not None else sys._getframe(1).f_globals.get("__name__", "")
        self.source_parts = source_parts_of(owner)

    def source_hash(self) -> str:
        """Hash of the code that can change this namespace's artifacts (see the module docstring)."""
        return package_source_hash(self.source_parts)

    def key(self, description: Any, include_source: bool = True) -> str:
        """The content hash naming the artifact described by ``description``."""
        parts = [description, self.source_hash()] if include_source else [description]
        return content_hash(*parts)

    def path(self, description: Any, include_source: bool = True) -> Path:
        return self.directory / f"{self.key(description, include_source)}.pt"

    def exists(self, description: Any, include_source: bool = True) -> bool:
        return self.path(description, include_source).is_file()

    def load(self, description: Any, include_source: bool = True, map_location: Any = "cpu") -> Any:
        import torch

        return torch.load(self.path(description, include_source), map_location=map_location, weights_only=False)

    def save(self, description: Any, artifact: Any, include_source: bool = True) -> Path:
        path = self.path(description, include_source)
        atomic_torch_save(artifact, path)
        return path

    def get_or_create(self, description: Any, build: Callable[[], Any], include_source: bool = True,
                      map_location: Any = "cpu") -> Any:
        """Load the artifact for ``description`` if cached, otherwise ``build()`` it, save it and return it."""
        if self.exists(description, include_source):
            return self.load(description, include_source, map_location)
        # Built under generators seeded from the description: the artifact does not depend on what this process
        # drew before (which networks were cached), and the caller's random state is the same after a hit or a miss.
        with isolated_rng(int(content_hash(description)[:15], 16)):
            artifact = build()
        self.save(description, artifact, include_source)
        return artifact
