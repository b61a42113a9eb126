"""Imports run one way: runtime/cache <- data, metrics <- models <- methods, train <- audit <- experiments <- runner,
cli.

Every ``import anonpaper.X`` / ``from anonpaper.X import ...`` in the package (top-level or inside a function) is
read from the source with :mod:`ast` and must not reach a higher layer than the importing module's. Same-layer
imports are allowed (``data`` uses ``metrics`` helpers and the other way round), and so are relative imports
(they stay inside one sub-package).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[1] / "anonpaper"

# The package's layers, lowest first. A module may import its own layer and the ones below.
LAYERS: dict[str, int] = {
    "runtime": 0, "cache": 0,
    "data": 1, "metrics": 1,
    "models": 2,
    "methods": 3, "train": 3,
    "audit": 4,
    "experiments": 5,
    "runner": 6, "cli": 6,
}


def _imported_subpackages(source: str) -> list[tuple[int, str]]:
    """(line, top-level sub-package) of every absolute ``anonpaper.*`` import in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "anonpaper":  # `from anonpaper import cache`
                names = [f"anonpaper.{alias.name}" for alias in node.names]
        else:
            continue
        found += [(node.lineno, name.split(".")[1]) for name in names if name.startswith("anonpaper.")]
    return found


def wrong_way_imports(package: Path) -> list[str]:
    """Every import in ``package`` that reaches a higher layer, as ``file:line: a -> b`` strings."""
    problems = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).with_suffix("").parts
        if relative == ("__init__",):
            continue
        own = relative[0]
        if own not in LAYERS:
            problems.append(f"{path}: sub-package {own!r} has no layer (add it to LAYERS)")
            continue
        for line, target in _imported_subpackages(path.read_text()):
            if target in LAYERS and LAYERS[target] > LAYERS[own]:
                problems.append(f"{path.relative_to(package.parent)}:{line}: {own} (layer {LAYERS[own]}) imports "
                                f"{target} (layer {LAYERS[target]})")
    return problems


def test_package_imports_run_one_way():
    problems = wrong_way_imports(PACKAGE)
    assert not problems, "imports against the layering:\n" + "\n".join(problems)


def test_checker_finds_a_planted_wrong_way_import(tmp_path):
    package = tmp_path / "anonpaper"
    (package / "models").mkdir(parents=True)
    (package / "train").mkdir()
    (package / "train" / "loop.py").write_text("import torch\nfrom anonpaper.models.unet import UNet\n")
    (package / "models" / "unet.py").write_text(
        "import torch\n\n\ndef build():\n    from anonpaper.train.loop import fit  # wrong way, inside a function\n")
    problems = wrong_way_imports(package)
    assert len(problems) == 1 and "models/unet.py:5: models (layer 2) imports train (layer 3)" in problems[0]


def test_checker_flags_an_unknown_subpackage(tmp_path):
    package = tmp_path / "anonpaper"
    (package / "extras").mkdir(parents=True)
    (package / "extras" / "thing.py").write_text("x = 1\n")
    assert "has no layer" in wrong_way_imports(package)[0]
