"""Assertions on the smoke-profile results records written by `anonpaper reproduce --profile smoke`.

Run after the notebooks (``make test`` does both): ``pytest -m notebooks``. Every record gets the schema checks
and the decision-rule check (:func:`anonpaper.experiments.claims.check_record`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anonpaper.experiments.claims import Claim, check_record
from anonpaper.runner.record import read_record
from anonpaper.runner.studies import load_registry

pytestmark = pytest.mark.notebooks
ROOT = Path(__file__).resolve().parents[1]
PROFILE = "smoke"
STUDIES = [study.name for study in load_registry(ROOT).ordered()]


def _record(name: str) -> dict:
    path = ROOT / "runs" / PROFILE / f"{name}.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `anonpaper reproduce --profile {PROFILE}` first")
    return read_record(path)


@pytest.mark.parametrize("name", STUDIES)
def test_record_is_complete(name):
    record = _record(name)
    assert record["status"] == "ok", record.get("error")
    assert record["profile"] == PROFILE and record["seed"] is not None
    assert record["metrics"], "a chapter records metrics"
    assert record["environment"]["versions"]["anonpaper"]
    for claim in record["claims"]:
        # Rebuilding the claim re-checks its vocabulary (verdict, kind, a reason when undecided).
        rebuilt = Claim(**{key: value for key, value in claim.items() if key != "holds"})
        assert claim["holds"] is rebuilt.holds, f"claim {claim['id']}: holds disagrees with its verdict"
        assert claim["ours"] is not None, f"claim {claim['id']} has no measured value"
        if claim["n"] is not None and claim["min_n"] is not None and claim["n"] < claim["min_n"]:
            assert claim["verdict"] == "undecided", f"claim {claim['id']} decided on {claim['n']} < {claim['min_n']}"


@pytest.mark.parametrize("name", STUDIES)
def test_every_verdict_follows_from_its_recorded_fields(name):
    """Each claim carries its rule, effect, SE, margin and instruments; recomputing the verdict from them by the one
    rule (what `anonpaper records check` does) gives the recorded verdict."""
    assert check_record(_record(name)) == []


def test_book_was_built():
    assert (ROOT / "runs" / PROFILE / "book" / "_build" / "html" / "index.html").is_file()


@pytest.mark.parametrize("name", STUDIES)
def test_labelled_figures_have_images(name):
    """Every cell labelled as a figure (mystnb metadata) produced a PNG, so the book shows it."""
    import json

    notebook = json.loads((ROOT / "runs" / PROFILE / f"{name}.ipynb").read_text())
    missing = [cell["metadata"]["mystnb"]["figure"]["name"] for cell in notebook["cells"]
               if cell["cell_type"] == "code" and "figure" in cell.get("metadata", {}).get("mystnb", {})
               and not any("image/png" in output.get("data", {}) for output in cell.get("outputs", []))]
    assert not missing, f"figure cells without an image output: {missing}"
