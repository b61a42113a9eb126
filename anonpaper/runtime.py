"""Runtime helpers shared by every part of the package: seeding, device choice, hashing, versions.

Determinism contract: after ``seed_everything(seed)`` the same code on CPU produces identical results. Code that
needs randomness should take an explicit ``seed`` or ``torch.Generator``/``numpy.random.Generator`` rather than
rely on global state; ``seed_everything`` exists for third-party code that does use global state.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import subprocess
import sys
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import numpy as np

PACKAGE_DIR = Path(__file__).resolve().parent


def seed_everything(seed: int, deterministic: bool = True) -> None:
    """Seed Python, NumPy and PyTorch (CPU and CUDA) global generators.

    Args:
        seed: Non-negative integer seed.
        deterministic: Also ask PyTorch for deterministic kernels (cuDNN deterministic, no benchmark). On CPU the
            default kernels are already deterministic for the operations this package uses.

    Raises:
        ValueError: If ``seed`` is negative or not an integer.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    import torch

    random.seed(int(seed))
    np.random.seed(int(seed) % (2**32))
    torch.manual_seed(int(seed))
    if deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def capture_rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's and PyTorch's global generators (CPU and, if present, CUDA)."""
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def isolated_rng(seed: int):
    """Run a block with Python's, NumPy's and PyTorch's generators seeded from ``seed``, then give the caller's
    states back: what the block draws neither depends on what ran before nor changes what runs after.

    The artifact cache builds every artifact inside one, so a network's initialisation is the same whether the
    networks cached before it were loaded or trained in this process (torch seeds its default generator
    differently in every process, and a cache hit draws nothing where a miss draws a whole training run).

    Example:
        >>> import torch
        >>> with isolated_rng(3):
        ...     first = torch.rand(2)
        >>> before = torch.get_rng_state()
        >>> with isolated_rng(3):
        ...     second = torch.rand(2)
        >>> bool(torch.equal(first, second)) and bool(torch.equal(before, torch.get_rng_state()))
        True
    """
    state = capture_rng_state()
    try:
        seed_everything(int(seed) % (2**63), deterministic=False)
        yield
    finally:
        restore_rng_state(state)


def get_device(prefer: str | None = None):
    """Pick the torch device: ``prefer`` or ``$ANONPAPER_DEVICE`` if set, else CUDA when available, else CPU.

    Args:
        prefer: A device string such as ``"cpu"`` or ``"cuda:0"``; overrides the environment.

    Returns:
        torch.device

    Raises:
        ValueError: If the requested device string is invalid or names CUDA on a machine without it.
    """
    import torch

    requested = prefer or os.environ.get("ANONPAPER_DEVICE")
    if requested:
        try:
            device = torch.device(requested)
        except RuntimeError as error:
            raise ValueError(f"invalid device {requested!r} (from ANONPAPER_DEVICE or argument): {error}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {requested!r} requested but CUDA is not available on this machine")
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cache_dir() -> Path:
    """The artifact cache directory: ``$ANONPAPER_CACHE`` or ``~/.cache/anonpaper`` (created if missing)."""
    path = Path(os.environ.get("ANONPAPER_CACHE", Path.home() / ".cache" / "anonpaper")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _canonical(obj: Any) -> Any:
    """Convert ``obj`` into JSON-serialisable data with a stable form (sorted keys, plain numbers)."""
    if isinstance(obj, dict):
        return {str(key): _canonical(value) for key, value in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_canonical(value) for value in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return {"__ndarray__": hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest(),
                "shape": list(obj.shape), "dtype": str(obj.dtype)}
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return {"__dataclass__": type(obj).__name__, **_canonical(dataclasses.asdict(obj))}
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    raise TypeError(f"cannot hash object of type {type(obj).__name__}: {obj!r}")


def content_hash(*parts: Any, length: int = 16) -> str:
    """A stable hexadecimal hash of JSON-like data (dicts, lists, numbers, strings, arrays, dataclasses).

    Two calls with equal content give the same hash across processes and machines.

    >>> content_hash({"b": 1, "a": [1, 2]}) == content_hash({"a": [1, 2], "b": 1})
    True
    """
    payload = json.dumps(_canonical(list(parts)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:length]


def derive_seed(seed: int, *parts: Any) -> int:
    """A stable 63-bit seed from a base ``seed`` and a description of what it seeds (strings, numbers, dicts...).

    Used wherever one run needs many independent seeds (a network's initialisation, an obfuscation draw, a
    bootstrap), so that each is reproducible on its own and changing one part of a run does not shift the others.

    >>> derive_seed(0, "classifier-init", "dr") == derive_seed(0, "classifier-init", "dr")
    True
    >>> derive_seed(0, "a") != derive_seed(1, "a")
    True
    """
    return int(content_hash({"seed": int(seed), "parts": list(parts)}), 16) % (2**63 - 1)


def replicate_parts(replicate: int) -> tuple:
    """The extra :func:`derive_seed` parts (and cache-description entries) of training replicate ``replicate`` of
    a network: none for replicate 0, so that the first replicate is the very network trained before replicates
    existed (same seed, same cache key); ``("replicate", r)`` for the others.

    >>> replicate_parts(0), replicate_parts(2)
    ((), ('replicate', 2))
    """
    if not isinstance(replicate, int) or replicate < 0:
        raise ValueError(f"a replicate is a non-negative integer, got {replicate!r}")
    return () if replicate == 0 else ("replicate", replicate)


def replicate_seed(seed: int, replicate: int) -> int:
    """The seed of training replicate ``replicate`` of a network whose trainer takes one plain seed: ``seed``
    itself for replicate 0 (the network trained before replicates existed), a derived 31-bit seed otherwise.

    >>> replicate_seed(7, 0), replicate_seed(7, 1) == replicate_seed(7, 1) != replicate_seed(7, 2)
    (7, True)
    """
    parts = replicate_parts(replicate)
    return seed if not parts else derive_seed(seed, *parts) % (2**31 - 1)


# The package parts below the chapters (``experiments``), the runner and the CLI: the code that builds, trains and
# measures; the conservative source of an artifact whose builder is not a package module.
LOWER_LAYERS = ("__init__.py", "runtime.py", "cache.py", "data", "metrics", "models", "methods", "train")


def package_source_hash(parts: Iterable[str] | None = None) -> str:
    """Hash of the package's ``.py`` files (paths and bytes), so results and cached artifacts tie to the code.

    Args:
        parts: Package-relative files or folders to hash (e.g. ``LOWER_LAYERS + ("experiments/generators",)``);
            None hashes the whole package. A part that does not exist hashes as empty (its name still counts).
    """
    if parts is None:
        files = sorted(PACKAGE_DIR.rglob("*.py"))
    else:
        files = []
        for part in sorted(set(parts)):
            target = PACKAGE_DIR / part
            files += sorted(target.rglob("*.py")) if target.is_dir() else ([target] if target.is_file() else [])
    digest = hashlib.sha256()
    if parts is not None:
        digest.update(repr(sorted(set(parts))).encode())
    for path in files:
        digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _module_file(name: str) -> Path | None:
    """The source file of package module ``name`` (dotted, e.g. ``anonpaper.metrics.privacy``) in this checkout."""
    parts = name.split(".")
    if parts[0] != PACKAGE_DIR.name:
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(name: str, path: Path) -> set[str]:
    """Package modules that module ``name`` (source ``path``) names in its import statements: for
    ``from package import module`` the module only (the package's ``__init__`` is a parent, see
    :func:`import_closure`), for ``from package import name`` the package."""
    import ast

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names if _module_file(f"{base}.{alias.name}")}
            found.update(submodules)
            if len(submodules) < len(node.names):  # some name comes from the package's __init__ itself
                found.add(base)
    return {module for module in found if module.split(".")[0] == PACKAGE_DIR.name}


def import_closure(name: str) -> tuple[str, ...]:
    """Package modules that module ``name`` imports, directly or through others, itself included (read from the
    source files, statically: imports inside functions count too, so the closure errs on the large side).

    An artifact cache keys what a module builds on the source of this closure: code the builder never reaches
    (another chapter, an unrelated method) cannot change the artifact. A package whose ``__init__`` only runs because
    one of its submodules is imported (``import a.b.c`` runs ``a/b/__init__``) adds its ``__init__`` file but not
    what that file imports: a chapter's face re-exports its figures and claims, which the chapter's builders never
    call. Importing a name from the package itself (``from a.b import x``) follows the ``__init__``'s imports.

    Returns:
        Sorted dotted names of the modules that have a source file in this checkout.

    Example:
        >>> closure = import_closure("anonpaper.cache")
        >>> "anonpaper.runtime" in closure and "anonpaper.experiments" not in closure
        True
        >>> closure = import_closure("anonpaper.experiments.generators.pipeline")
        >>> "anonpaper.experiments.generators" in closure               # its __init__ runs
        True
        >>> "anonpaper.experiments.generators.figures" in closure       # what that __init__ re-exports does not count
        False
    """
    followed: set[str] = set()
    parents: set[str] = set()
    pending = [name]
    while pending:
        module = pending.pop()
        if module in followed:
            continue
        followed.add(module)
        parents.update(_parent_packages(module))
        path = _module_file(module)
        if path is not None:
            pending.extend(_imported_modules(module, path) - followed)
    return tuple(sorted(module for module in followed | parents if _module_file(module) is not None))


def _parent_packages(module: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``: the packages whose ``__init__`` runs before ``module``."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def module_files(names: Iterable[str]) -> tuple[str, ...]:
    """Package-relative source paths of dotted module names (for :func:`package_source_hash`)."""
    files = (_module_file(name) for name in names)
    return tuple(sorted(str(path.relative_to(PACKAGE_DIR)) for path in files if path is not None))


def module_source_hashes(names: Iterable[str] | None = None) -> dict[str, str]:
    """Source hash of each package module: of ``names``, or of every ``anonpaper`` module imported in this process.

    A results record keeps these for the modules its run used, so the book can tell whether the code behind a
    chapter changed (and which module) rather than whether anything in the package changed.

    Args:
        names: Dotted module names; None takes the package's modules in ``sys.modules``.

    Returns:
        ``{name: 16 hex digits}``, sorted by name; ``""`` for a module whose source file no longer exists.

    Example:
        >>> hashes = module_source_hashes(["anonpaper.runtime", "anonpaper.gone"])
        >>> len(hashes["anonpaper.runtime"]), hashes["anonpaper.gone"]
        (16, '')
    """
    if names is None:
        names = [name for name in sys.modules if name == PACKAGE_DIR.name or name.startswith(PACKAGE_DIR.name + ".")]
    hashes = {}
    for name in sorted(set(names)):
        path = _module_file(name)
        hashes[name] = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path is not None else ""
    return hashes


def git_modified_files(folder: str | Path | None = None) -> list[str] | None:
    """Tracked files with uncommitted changes (staged or not) in the git checkout holding ``folder``.

    Args:
        folder: Any folder of the checkout (default: the package's).

    Returns:
        Their paths relative to the checkout's top folder (``git status --porcelain``; untracked files do not
        count), empty for a clean checkout, or None when ``folder`` is not in a git checkout or git is missing.
    """
    try:
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder or PACKAGE_DIR,
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line[3:] for line in status.splitlines() if line.strip()]


@lru_cache(maxsize=4)
def git_sha(folder: str | Path | None = None) -> str | None:
    """The git commit of the checkout holding ``folder`` (default: the package's), with ``-dirty`` when tracked files
    are modified (:func:`git_modified_files`), or None outside a git checkout."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder or PACKAGE_DIR, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    modified = git_modified_files(folder or PACKAGE_DIR)
    if not sha or modified is None:
        return None
    return sha + ("-dirty" if modified else "")


def versions() -> dict[str, str | None]:
    """Versions of Python, the package and the main libraries, for results records and first notebook cells."""
    import importlib.metadata as metadata

    from anonpaper import __version__

    info: dict[str, str | None] = {"anonpaper": __version__, "python": platform.python_version()}
    for name in ("torch", "torchvision", "numpy", "pandas", "scipy", "scikit-learn", "scikit-image",
                 "opencv-python-headless", "timm", "piq", "papermill", "jupyter-book"):
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    return info


# Environment variables that cap the instruction sets the CPU kernels may use: oneDNN's (convolutions, matrix
# products) and ATen's own vectorised kernels. Set, they make a run's arithmetic that of an older processor.
CPU_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


@lru_cache(maxsize=1)
def processor_name() -> str:
    """The processor's model, e.g. ``"Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"``: ``model name`` in
    ``/proc/cpuinfo`` (Linux), else what :mod:`platform` knows, else ``"unknown"``."""
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_arithmetic() -> dict[str, Any]:
    """What decides the CPU arithmetic of a run besides the code: the processor, the instruction set PyTorch's
    kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``, e.g. ``"AVX512"``, ``"AVX2"``) and the caps
    set in the environment (:data:`CPU_CAP_VARIABLES`, only those set). Floating-point results are bit-identical
    only for the same processor capability, caps and thread count."""
    import torch

    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):  # older PyTorch
        capability = None
    return {"processor": processor_name(), "cpu_capability": capability,
            "cpu_caps": {name: os.environ[name] for name in CPU_CAP_VARIABLES if os.environ.get(name)}}


def environment_info() -> dict[str, Any]:
    """Everything a results record needs to say where and with what it ran (``processor``, ``cpu_capability``
    and ``cpu_caps`` from :func:`cpu_arithmetic`)."""
    import torch

    device = get_device()
    info: dict[str, Any] = {
        "versions": versions(),
        "git_sha": git_sha(),
        "package_source_hash": package_source_hash(),
        "package_modules": module_source_hashes(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else processor_name(),
        **cpu_arithmetic(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "cache_dir": str(cache_dir()),
    }
    return info


def print_config() -> dict[str, Any]:
    """Print versions, git SHA, device and cache directory (the first cell of every notebook); return them."""
    info = environment_info()
    width = max(len(name) for name in info["versions"]) + 2
    for name, version in info["versions"].items():
        print(f"{name:<{width}}{version}")
    for key in ("git_sha", "package_source_hash", "device", "device_name", "processor", "cpu_capability", "cpu_caps",
                "torch_threads", "cache_dir"):
        print(f"{key:<{width}}{info[key]}")
    return info
