"""The real project's study registry and book agree, and every notebook is clean and well-formed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anonpaper.runner.book import toc_chapters
from anonpaper.runner.studies import load_registry, study_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def test_toc_chapters_are_exactly_the_registered_studies():
    registry = load_registry(ROOT)
    assert toc_chapters(ROOT / "book" / "_toc.yml") == [study.name for study in registry.ordered()]


@pytest.mark.parametrize("study", load_registry(ROOT).ordered(), ids=lambda study: study.name)
def test_notebook_is_clean_and_parameterized(study):
    notebook = json.loads(study.notebook.read_text())
    code_cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert not any(cell.get("outputs") for cell in code_cells), "source notebooks are stored without outputs"
    ids = [cell.get("id") for cell in notebook["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), f"cell ids must be unique (nbformat 4.5): {ids}"
    tagged = [cell for cell in code_cells if "parameters" in cell.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    defaults = study.notebook_parameters()
    assert "SEED" in defaults
    for profile in registry_profiles():
        unknown = set(study.parameters(profile)) - set(defaults)
        assert not unknown, f"params.yaml sets unknown parameters {unknown} for {study.name} at {profile}"
    first_code = "".join(code_cells[0]["source"]) if code_cells else ""
    assert "print_config" in first_code or "print_config" in "".join(code_cells[1]["source"]), \
        "an early cell prints versions, git SHA and device"


def registry_profiles():
    return list(load_registry(ROOT).profiles)


def test_study_config_applies_the_profile_over_the_config_defaults():
    registry = load_registry()
    smoke = registry.study("02_generators").parameters("smoke")
    config = study_config("02_generators", "smoke")
    assert config.parameters()["RETINA_PATIENTS"] == smoke["RETINA_PATIENTS"]
    quick = study_config("02_generators", "quick")
    assert quick == registry.study("02_generators").config_class()()
    with pytest.raises(ValueError, match="unknown profile"):
        study_config("02_generators", "huge")
    with pytest.raises(ValueError, match="unknown notebook"):
        study_config("99_nothing", "smoke")
    # A chapter's number alone names it; a number no chapter has is refused like any unknown name.
    assert registry.study("02") is registry.study("02_generators") is registry.study("02_generators.ipynb")
    with pytest.raises(ValueError, match="unknown notebook '99'"):
        registry.study("99")
