"""Comparing two runs' results records: ``compare_records`` and ``anonpaper records diff`` on planted records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from anonpaper.cli import main
from anonpaper.runner.record import SCHEMA, compare_records, is_timing_metric, relative_difference

pytestmark = pytest.mark.unit


def record(study: str, metrics: dict, verdicts: dict[str, str] | None = None, **extra) -> dict:
    """A minimal results record (what ``read_record`` accepts) with the given metrics and claim verdicts."""
    claims = [{"id": claim, "statement": claim, "verdict": verdict} for claim, verdict in (verdicts or {}).items()]
    return {"schema": SCHEMA, "study": study, "metrics": metrics, "claims": claims, "status": "ok", **extra}


def write(folder: Path, *records: dict, names: list[str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for index, item in enumerate(records):
        name = names[index] if names else f"{item['study']}.json"
        (folder / name).write_text(json.dumps(item))
    return folder


BASE = {"dice": 0.914, "auroc": 0.75, "qwk": 0.0, "count": 120, "seconds/run": 300.0, "jvp/channel_images_per_s": 8.0}


def test_compare_records_finds_the_planted_differences_and_ignores_timings():
    changed = dict(BASE, dice=0.852, qwk=2e-4, **{"seconds/run": 999.0, "jvp/channel_images_per_s": 2.0})
    first = record("02_generators", BASE, {"fidelity": "holds", "labels": "undecided"},
                   environment={"processor": "A"}, seconds=10.0)
    second = record("02_generators", changed, {"fidelity": "holds", "labels": "does not hold"},
                    environment={"processor": "B"}, seconds=99.0)
    difference = compare_records(first, second)
    assert difference.compared == 4  # dice, auroc, qwk, count; the two timings are left out
    assert [change.name for change in difference.metrics] == ["qwk", "dice"]  # largest relative first
    dice = next(change for change in difference.metrics if change.name == "dice")
    assert dice.absolute == pytest.approx(0.062) and dice.relative == pytest.approx(0.062 / 0.914)
    assert difference.largest_absolute.name == "dice"
    # qwk moved by 2e-4 from 0: relative to the floor (1e-3), not to 2e-4.
    assert difference.largest_relative.name == "qwk"
    assert difference.largest_relative.relative == pytest.approx(0.2)
    assert [(v.claim, v.first, v.second) for v in difference.verdicts] == [("labels", "undecided", "does not hold")]
    assert [change.name for change in difference.beyond(0.1)] == ["qwk"]
    assert difference.beyond(0.25) == ()
    assert not difference.identical


def test_identical_records_and_missing_or_null_metrics():
    same = compare_records(record("x", BASE, {"a": "holds"}), record("x", dict(BASE), {"a": "holds"}))
    assert same.identical and same.compared == 4 and same.largest_relative is None
    nulls = compare_records(record("x", {"a": None, "b": 1.0, "c": 2.0}), record("x", {"a": None, "b": None}))
    # a: null in both (equal); b: a number against null; c: in the first record only.
    assert nulls.compared == 1
    assert {change.name: (change.first, change.second) for change in nulls.metrics} == {"b": (1.0, None),
                                                                                      "c": (2.0, None)}
    assert all(math.isinf(change.relative) for change in nulls.metrics)
    assert len(nulls.beyond(1e9)) == 2 and nulls.numeric == ()


def test_claims_that_appear_or_disappear_are_verdict_changes():
    difference = compare_records(record("x", {}, {"old": "holds"}), record("x", {}, {"new": "holds"}))
    assert {(v.claim, v.first, v.second) for v in difference.verdicts} == {("new", None, "holds"),
                                                                           ("old", "holds", None)}


def test_records_of_different_studies_are_refused():
    with pytest.raises(ValueError, match="different studies"):
        compare_records(record("a", {}), record("b", {}))


@pytest.mark.parametrize("name, timing", [("seconds/co-training", True), ("inversion/seconds_per_image", True),
                                          ("fundus-sg2/train_s_per_kimg", True), ("jvp/seconds", True),
                                          ("snow/p=0.1/sex_accuracy_se", False), ("generator/kimg", False),
                                          ("secondsless", False)])
def test_timing_metric_names(name, timing):
    assert is_timing_metric(name) is timing


def test_relative_difference_floor_and_symmetry():
    assert relative_difference(1.0, 1.1) == relative_difference(1.1, 1.0) == pytest.approx(0.1 / 1.1)
    assert relative_difference(0.0, 0.0) == 0.0
    assert relative_difference(0.0, 1e-5, floor=1e-2) == pytest.approx(1e-3)


def test_cli_diff_prints_largest_differences_and_honours_the_tolerance(tmp_path, capsys):
    first = write(tmp_path / "a", record("01_snow_vs_snow", BASE, {"c1": "holds"}),
                  record("04_gmia", {"auc": 0.5}, {"c2": "holds"}), record("05_k_salsa", {"x": 1.0}))
    second = write(tmp_path / "b", record("01_snow_vs_snow", dict(BASE, dice=0.904), {"c1": "holds"}),
                   record("04_gmia", {"auc": 0.5}, {"c2": "holds"}))
    assert main(["records", "diff", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "01_snow_vs_snow: 4 metrics compared, 1 differ" in out
    assert "largest absolute difference: 0.01 (dice: 0.914 -> 0.904)" in out
    assert "largest relative difference: 0.0109 (dice" in out
    assert "04_gmia: 1 metrics compared, 0 differ" in out
    assert "note: 05_k_salsa is in" in out
    assert main(["records", "diff", str(first), str(second), "--tolerance", "0.02"]) == 0
    assert "every metric within relative tolerance 0.02" in capsys.readouterr().out
    assert main(["records", "diff", str(first), str(second), "--tolerance", "0.005"]) == 1
    assert "beyond tolerance 0.005: 1 metrics" in capsys.readouterr().out


def test_cli_diff_fails_a_tolerance_on_a_changed_verdict_and_reads_single_records(tmp_path, capsys):
    folder = write(tmp_path / "runs", record("04_gmia", {"auc": 0.5}, {"c2": "holds"}),
                   record("04_gmia", {"auc": 0.9}, {"c2": "undecided"}, status="failed"),
                   names=["04_gmia.json", "04_gmia.failed.json"])
    (folder / "notes.json").write_text(json.dumps({"not": "a record"}))
    other = write(tmp_path / "other", record("04_gmia", {"auc": 0.5}, {"c2": "does not hold"}))
    assert main(["records", "diff", str(folder), str(other / "04_gmia.json"), "--tolerance", "1"]) == 1
    out = capsys.readouterr().out
    assert "verdict c2: holds -> does not hold" in out  # the failed run's record was left out
    assert "notes.json" in out and "skipped" in out


def test_cli_diff_refuses_bad_input(tmp_path, capsys):
    first = write(tmp_path / "a", record("00_cohorts", {"a": 1.0}))
    second = write(tmp_path / "b", record("01_snow_vs_snow", {"a": 1.0}))
    assert main(["records", "diff", str(first), str(second)]) == 2
    assert "no study in common" in capsys.readouterr().err
    assert main(["records", "diff", str(first), str(tmp_path / "absent")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["records", "diff", str(first), str(tmp_path / "empty")]) == 2
    assert "holds no results records" in capsys.readouterr().err
    assert main(["records", "diff", str(first), str(first), "--tolerance", "-1"]) == 2
    assert main(["records", "diff", str(first), str(first), "--floor", "0"]) == 2
