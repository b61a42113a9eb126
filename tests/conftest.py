"""Shared pytest fixtures: an isolated cache, and a small project (fixture notebooks + book) for the runner."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import torch

FIXTURES = Path(__file__).parent / "fixtures"

# Modules whose tests compare floating-point results across batch sizes, chunkings, thread counts or kernel paths
# (reference / fast / Triton). `make test` runs them a second time with the CPU kernels capped at AVX2
# (ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2, NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL"), so a comparison
# that only holds with AVX-512 kernels fails on any machine, not first on an AVX2-only one.
NUMERICS_MODULES = {
    "test_gmia_method.py", "test_jacobian_edit.py", "test_ksalsa.py", "test_sspace_baselines.py",
    "test_stylegan_models.py", "test_stylegan_ops.py", "test_stylegan_projector.py", "test_stylegan_sspace.py",
    "test_stylegan_train.py", "test_train_loop.py", "test_distributed.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in NUMERICS_MODULES:
            item.add_marker(pytest.mark.numerics)


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Point the artifact cache at a temporary folder so tests never touch a user's cache."""
    import os

    previous = os.environ.get("ANONPAPER_CACHE")
    os.environ["ANONPAPER_CACHE"] = str(tmp_path_factory.mktemp("anonpaper-cache"))
    yield
    if previous is None:
        os.environ.pop("ANONPAPER_CACHE", None)
    else:
        os.environ["ANONPAPER_CACHE"] = previous


@pytest.fixture(autouse=True)
def _skip_gpu_without_cuda(request):
    if request.node.get_closest_marker("gpu") and not torch.cuda.is_available():
        pytest.skip("needs CUDA")


@pytest.fixture
def fixture_project(tmp_path) -> Path:
    """A project root with two fixture studies (the second depends on the first) and a minimal book."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for name in ("fixture_a", "fixture_b"):
        shutil.copy(FIXTURES / "fixture_study.ipynb", notebooks / f"{name}.ipynb")
    (notebooks / "params.yaml").write_text(textwrap.dedent("""
        profiles:
          smoke: {description: "seconds"}
          quick: {description: "minutes"}
        studies:
          fixture_a:
            title: "Fixture A"
            parameters:
              smoke: {N_SAMPLES: 200}
          fixture_b:
            title: "Fixture B"
            depends_on: [fixture_a]
            parameters:
              smoke: {N_SAMPLES: 300, SLEEP_SECONDS: 0.0}
        """))
    book = tmp_path / "book"
    book.mkdir()
    (book / "_config.yml").write_text(textwrap.dedent("""
        title: Fixture book
        only_build_toc_files: true
        execute:
          execute_notebooks: "off"
        """))
    (book / "_toc.yml").write_text(textwrap.dedent("""
        format: jb-book
        root: intro
        chapters:
          - file: chapters/fixture_a
          - file: chapters/fixture_b
          - file: claims_ledger
        """))
    (book / "intro.md").write_text("# Fixture book\n\nA book built from executed fixture notebooks.\n")
    return tmp_path


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests use one CPU thread: tiny models run faster so, and CI's two cores are shared with other work."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def load_benchmark():
    """A loader of the scripts in ``benchmarks/`` (not a package) by file name: ``load_benchmark("bench_stylegan")``
    returns the executed module. The folder is on ``sys.path`` while the script runs its imports, as it is for
    ``python benchmarks/NAME.py``, so a script may import its neighbours (``from bench_stylegan import ...``)."""
    import importlib.util
    import sys

    folder = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(folder))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(folder))
        return module

    return load
