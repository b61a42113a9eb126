"""The chapter pattern: configs are the single source of parameters, claims speak one vocabulary."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from anonpaper.experiments.chapter import ChapterConfig, parameter
from anonpaper.experiments.claims import DECISION_Z, Instrument, decide
from anonpaper.runner.parameter_cells import notebook_parameters_source
from anonpaper.runner.studies import load_registry

pytestmark = pytest.mark.unit
REGISTRY = load_registry()


@pytest.mark.parametrize("name", list(REGISTRY.studies))
def test_every_chapter_names_a_config_and_its_notebook_cell_is_generated_from_it(name):
    study = REGISTRY.studies[name]
    assert study.config, f"{name}: notebooks/params.yaml names no config class"
    config_class = study.config_class()
    assert issubclass(config_class, ChapterConfig)
    assert notebook_parameters_source(study) == config_class.parameters_cell(), (
        f"{study.notebook}: the parameters cell differs from {study.config}.parameters_cell(); run "
        "`python -m anonpaper.runner.parameter_cells`")
    config_class()  # the defaults (the quick profile) are a valid config


@pytest.mark.parametrize("name", list(REGISTRY.studies))
def test_profile_overrides_make_valid_configs_and_quick_is_the_defaults(name):
    study = REGISTRY.studies[name]
    config_class = study.config_class()
    assert not study.parameters("quick"), f"{name}: quick must be the config's defaults (quick: {{}})"
    defaults = config_class().parameters()
    for profile in REGISTRY.profiles:
        config = config_class.from_parameters({**defaults, **study.parameters(profile)})
        assert config.parameters() == {**defaults, **study.parameters(profile)} or profile == "quick"


@dataclass(frozen=True)
class _Demo(ChapterConfig):
    seed: int = parameter(0, "Seed.")
    sizes: tuple = parameter((1, 2), "Sizes in pixels.")

    def __post_init__(self):
        if self.seed < 0:
            raise ValueError(f"SEED must be >= 0, got {self.seed}")


def test_config_round_trip_and_validation():
    config = _Demo.from_parameters({"SEED": 2, "SIZES": [3], "UNRELATED": 1})
    assert config == _Demo(seed=2, sizes=(3,))
    assert _Demo.from_parameters(config.parameters()) == config
    with pytest.raises(ValueError, match="SEED must be >= 0"):
        _Demo.from_parameters({"SEED": -1})
    with pytest.raises(TypeError, match="immutable"):
        parameter([1, 2], "a list default")


def test_claim_vocabulary_and_the_one_small_test_set_rule():
    rule = {"rule": "directional", "se": 0.1}
    held = decide("a", "A", paper=1, ours=2, effect=1.0, n=50, min_n=40, **rule)
    failed = decide("a", "A", paper=1, ours=0, effect=-1.0, n=50, min_n=40, **rule)
    small = decide("a", "A", paper=1, ours=2, effect=1.0, n=10, min_n=40, **rule)
    noisy = decide("a", "A", paper=1, ours=2, effect=0.1, **rule)
    assert [c.verdict for c in (held, failed, small, noisy)] == ["holds", "does not hold", "undecided", "undecided"]
    assert [c.holds for c in (held, failed, small, noisy)] == [True, False, None, None]
    assert small.reason.startswith("too few test images (10 < 40)")
    broken = decide("a", "A", paper=1, ours=2, effect=1.0, instruments=[Instrument("vessel segmenter test Dice",
                                                                                   0.2, 0.5)], **rule)
    assert broken.verdict == "undecided" and "vessel segmenter test Dice 0.2 < floor 0.5" in broken.reason
    with pytest.raises(TypeError):
        decide("a", "A", paper=1, ours=2, holds=True)  # a verdict is never typed in
    with pytest.raises(ValueError, match="kind"):
        decide("a", "A", paper=1, ours=2, effect=1.0, kind="other", **rule)
    assert DECISION_Z == 2.0


@pytest.mark.parametrize("name", list(REGISTRY.studies))
def test_every_figure_cell_has_a_label_a_caption_and_alt_text(name):
    """MyST-NB reads figure labels, captions and alt text only under the cell's ``mystnb`` key; alt text put anywhere
    else leaves the book's image with its file name as alt (what the browser test reports), so catch it here."""
    import json

    notebook = json.loads(REGISTRY.studies[name].notebook.read_text())
    problems = []
    for cell in notebook["cells"]:
        metadata = cell.get("metadata", {})
        if cell["cell_type"] != "code" or not ({"mystnb", "image", "figure"} & set(metadata)):
            continue
        where = cell.get("id", "?")
        presentation = metadata.get("mystnb", {})
        stray = sorted({"image", "figure"} & set(metadata))
        if stray:
            problems.append(f"{where}: {stray} outside 'mystnb'")
        figure = presentation.get("figure")
        if figure is None:
            continue
        if not (figure.get("name") and figure.get("caption")):
            problems.append(f"{where}: a figure without a name or caption")
        if not presentation.get("image", {}).get("alt", "").strip():
            problems.append(f"{where}: a figure without alt text under mystnb.image.alt")
    assert not problems, f"{name}: " + "; ".join(problems)
