"""The phantoms render the pixels the published results were computed from.

For the same seeds, a phantom's pixels depend on the OpenCV release that draws them (5.0.0.93 and 5.1.0.95 draw
the same retina differently) and, in its parameter table, on NumPy's kernels (AVX-512 and AVX2 ``exp`` differ in
the last bit of some rows). ``make install`` therefore installs every library at the version in ``constraints.txt``,
the environment of the published run. These tests pin a digest of the first images of each phantom under those
versions, so an install or a code change that draws other pixels fails here, not silently in the results.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anonpaper.data.population import RENDERING_LIBRARIES, numpy_avx512, rendering_libraries
from anonpaper.data.registry import load_cohort

pytestmark = [pytest.mark.unit, pytest.mark.numerics]

ROOT = Path(__file__).resolve().parents[1]
# SHA-256 (first 16 hex digits) of the first four images' bytes, 3 patients (subjects) at 128 px, seed 0, under
# constraints.txt. Measured on an AVX-512 processor with NumPy's AVX-512 kernels and again with them disabled
# (NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL"): the same digests. Under OpenCV 5.0.0.93 the retina gives
# 83ceaee28c1da9c4 and the chest X-ray 930e1bee9ebc5696.
PHANTOM_DIGESTS = {"phantom-retina": "43a61cbe688d71aa", "phantom-cxr": "bc7530bcaafe49d4",
                   "phantom-iris": "930dc0d98432833a"}


def pinned_versions() -> dict[str, str]:
    """``name: version`` of every ``name==version`` line of constraints.txt (names lower-cased)."""
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {match[1].lower(): match[2] for line in lines if (match := re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line))}


def phantom_digest(dataset: str) -> str:
    size = {"n_subjects" if dataset == "phantom-iris" else "n_patients": 3}
    cohort = load_cohort(dataset, image_size=128, seed=0, **size)
    digest = hashlib.sha256()
    for index in range(4):
        digest.update(np.ascontiguousarray(cohort.image(index)).tobytes())
    return digest.hexdigest()[:16]


def test_constraints_pin_every_rendering_library():
    pinned = pinned_versions()
    assert {"torch", "torchvision", "numpy", "opencv-python-headless", "pandas", "scipy"} <= set(pinned)
    assert pinned["torch"] == "2.14.1" and pinned["torchvision"] == "0.29.1"  # the CUDA build the Makefile names
    assert set(RENDERING_LIBRARIES) <= set(pinned)


@pytest.mark.parametrize("dataset", sorted(PHANTOM_DIGESTS))
def test_phantom_pixels_are_those_of_the_published_environment(dataset):
    installed, pinned = rendering_libraries(), pinned_versions()
    found = phantom_digest(dataset)
    assert found == PHANTOM_DIGESTS[dataset], (
        f"{dataset} renders other pixels here ({found}, expected {PHANTOM_DIGESTS[dataset]}) with "
        + ", ".join(f"{name} {installed[name]} (constraints.txt: {pinned.get(name)})" for name in RENDERING_LIBRARIES)
        + f", NumPy AVX-512 kernels {numpy_avx512()}: install with `make install` (pip -c constraints.txt); if the "
        "phantom's drawing changed on purpose, update the digest and republish results/")


def test_published_results_name_the_pinned_rendering_libraries():
    pinned = pinned_versions()
    records = sorted((ROOT / "results").glob("*/*.json"))
    assert records, "no published results records under results/"
    for path in records:
        environment = json.loads(path.read_text()).get("environment") or {}
        recorded = environment.get("versions") or {}
        for name in RENDERING_LIBRARIES:
            assert recorded.get(name) == pinned[name], (
                f"{path.relative_to(ROOT)} was computed with {name} {recorded.get(name)}, constraints.txt pins "
                f"{pinned[name]}: republish it, or pin the version it used")


def test_numpy_avx512_follows_the_kernels_numpy_dispatches_to():
    probe = "from anonpaper.data.population import numpy_avx512; print(numpy_avx512())"
    capped = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env={**os.environ, "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL"}).stdout.split()[-1]
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    assert capped == ("False" if x86 else "None")  # what the AVX2 rerun of `make test` gives NumPy
    assert numpy_avx512() in ((True, False) if x86 else (None,))
