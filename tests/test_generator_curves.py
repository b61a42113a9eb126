"""Reading generator evaluations after the fact (``anonpaper generators curve``): the chapter's tree check decided
again from a curve point, two generators' trees compared beyond noise, and the refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from anonpaper.cli import main
from anonpaper.experiments.generators.curves import (CurveError, compare_trees, curve_table, read_curves,
                                                     tree_check)

PUBLISHED = Path(__file__).resolve().parents[1] / "results" / "quick" / "02_generators.json"
EVALUATION = {"eval_images": 200, "segmenter_epochs": 15, "classifier_backbone": "small_cnn", "classifier_epochs": 20,
              "retina_patients": 300, "cxr_patients": 120, "vessel_data_root": None, "tree_min_area": 12,
              "tree_jpeg_quality": 90}


def _point(kimg, length_per_piece, junctions, se=0.02, jpeg_change=0.1, check=""):
    """A curve point as a training job writes it; the real images have 150 px per piece and 8 junctions."""
    point = {"step": int(kimg * 125), "kimg": kimg, "train_seconds": 360.0 * kimg, "FD-vessel-unet": 4.0,
             "precision": 0.5, "recall": 0.25, "vessel_fraction/generated": 0.045, "vessel_fraction/real": 0.05,
             "labels/distance": 0.1, "segmenter_check": check, "vessel_skeleton/jpeg_change": jpeg_change,
             "vessel_skeleton/length_per_piece/real": 150.0, "vessel_skeleton/junctions_per_image/real": 8.0,
             "vessel_skeleton/length_per_piece/generated": length_per_piece,
             "vessel_skeleton/junctions_per_image/generated": junctions,
             "vessel_skeleton/length_per_piece/relative_difference/se": se,
             "vessel_skeleton/junctions_per_image/relative_difference/se": se}
    for name in ("pieces_per_image", "largest_piece"):
        point.update({f"vessel_skeleton/{name}/real": 4.0, f"vessel_skeleton/{name}/generated": 5.0})
    return point


def _run(folder: Path, points, evaluation=EVALUATION, kind="fundus-sg2") -> Path:
    run_dir = folder / f"{kind}.run"
    run_dir.mkdir(parents=True)
    record = {"format": "anonpaper.generator-run/1", "identity": {"kind": kind, "network_seed": 0},
              "curve": points, "sessions": []}
    if evaluation is not None:
        record["evaluation"] = evaluation
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


def test_the_published_chapters_tree_verdicts_are_decided_again_from_its_record():
    claims = {claim["id"]: claim for claim in json.loads(PUBLISHED.read_text())["claims"]}
    checked = 0
    for curve in read_curves(PUBLISHED):
        recorded = claims.get(f"{curve.kind}-vessel-tree")
        if recorded is None:
            continue
        claim = tree_check(curve, curve.points[0])
        assert (claim.verdict, claim.effect, claim.se) == (recorded["verdict"], recorded["effect"], recorded["se"])
        assert claim.reason == recorded["reason"]
        checked += 1
    assert checked == 2, "both fundus generators carry a tree claim"


def test_a_run_reads_as_a_table_with_the_tree_check_at_every_point(tmp_path):
    run_dir = _run(tmp_path, [_point(10, 30.0, 2.0), _point(20, 140.0, 7.5), _point(30, 140.0, 7.5, check="low")])
    (curve,) = read_curves(run_dir)
    assert curve.kind == "fundus-sg2" and curve.settings["tree_min_area"] == 12 and curve.settings["seed"] == 0
    table = curve_table(curve)
    assert list(table["kimg"]) == [10, 20, 30] and list(table["hours"]) == [1.0, 2.0, 3.0]
    # -80 % per piece is beyond the 50 % tolerance; -6.7 % and -6.25 % hold; a failed segmenter decides nothing
    assert list(table["tree check"]) == ["does not hold", "holds", "undecided"]
    assert table["length per piece vs real"][0] == "-80.0 % (SE 2.0)"
    assert tree_check(curve, curve.points[2]).instruments[0]["name"] == "low"
    # the JPEG floor of the tree statistics is read from the point too
    (shaky,) = read_curves(_run(tmp_path / "shaky", [_point(10, 140.0, 7.5, jpeg_change=0.3)]))
    assert tree_check(shaky, shaky.points[0]).verdict == "undecided"


def test_trees_compare_beyond_noise_on_each_statistic(tmp_path):
    (candidate,) = read_curves(_run(tmp_path / "a", [_point(10, 30.0, 2.0), _point(20, 90.0, 7.0)]))
    (reference,) = read_curves(_run(tmp_path / "b", [_point(310, 45.0, 7.0, se=0.03)]))
    table = compare_trees(candidate, reference).set_index("statistic")
    # length per piece: |-0.7| - |-0.4| = 0.3 closer, SE sqrt(0.02^2 + 0.03^2)
    assert table.loc["length per piece", "closer by"] == pytest.approx(0.3)
    assert table.loc["length per piece", "SE"] == pytest.approx(math.hypot(0.02, 0.03))
    assert table.loc["length per piece", "verdict"] == "closer" and table.loc["length per piece", "binding"]
    assert table.loc["junctions per image", "verdict"] == "within noise"
    earlier = compare_trees(candidate, reference, point=0).set_index("statistic")
    assert earlier.loc["length per piece", "verdict"] == "farther"  # -0.8 against -0.7
    with pytest.raises(CurveError, match="has 2 evaluations, no point 5"):
        compare_trees(candidate, reference, point=5)


def test_evaluations_of_other_real_images_or_settings_do_not_compare(tmp_path):
    (candidate,) = read_curves(_run(tmp_path / "a", [_point(10, 30.0, 2.0)]))
    legacy_evaluation = {name: value for name, value in EVALUATION.items() if name != "tree_min_area"}
    (legacy,) = read_curves(_run(tmp_path / "b", [_point(10, 30.0, 2.0)], evaluation=legacy_evaluation))
    assert legacy.settings["tree_min_area"] == 0, "a run recorded before TREE_MIN_AREA counted every piece"
    with pytest.raises(CurveError, match=r"evaluated differently.*TREE_MIN_AREA: 12 against 0"):
        compare_trees(candidate, legacy)
    (chest,) = read_curves(_run(tmp_path / "c", [_point(10, 30.0, 2.0)], kind="cxr-sg2"))
    with pytest.raises(CurveError, match="different modalities"):
        compare_trees(candidate, chest)


def test_files_that_hold_no_evaluation_are_refused_by_name(tmp_path):
    with pytest.raises(CurveError, match="no such file"):
        read_curves(tmp_path / "absent.json")
    (tmp_path / "text.json").write_text("not json")
    with pytest.raises(CurveError, match="text.json: not a JSON file"):
        read_curves(tmp_path / "text.json")
    (tmp_path / "other.json").write_text(json.dumps({"study": "03_vascular_sspace"}))
    with pytest.raises(CurveError, match="other.json: holds no generator evaluation"):
        read_curves(tmp_path / "other.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(CurveError, match="a JSON list"):
        read_curves(tmp_path / "list.json")
    (tmp_path / "kind.json").write_text(json.dumps({"kind": "fundus-sg9", "curve": []}))
    with pytest.raises(CurveError, match="unknown generator kind 'fundus-sg9'"):
        read_curves(tmp_path / "kind.json")


def test_the_command_prints_the_curve_and_the_comparison_and_exits_2_on_bad_input(tmp_path, capsys):
    run_dir = _run(tmp_path / "a", [_point(10, 30.0, 2.0), _point(20, 90.0, 7.0)])
    reference = _run(tmp_path / "b", [_point(310, 45.0, 7.0, se=0.03)])
    assert main(["generators", "curve", str(run_dir), "--against", str(reference), "--last", "1"]) == 0
    out = capsys.readouterr().out
    assert "fundus-sg2: " in out and "(2 evaluations)" in out and "tree check at the last evaluation: holds" in out
    shown = out.split("(2 evaluations)\n")[1].split("tree check at")[0].splitlines()
    assert len(shown) == 2 and shown[1].split()[0] == "20", "--last 1: the header and the last evaluation"
    assert "closer" in out
    assert main(["generators", "curve", str(run_dir), "--against", str(PUBLISHED)]) == 2
    assert "holds 3 generators' evaluations" in capsys.readouterr().err
    assert main(["generators", "curve", str(run_dir), "--kind", "cxr-sg2"]) == 2
    assert "no evaluation of cxr-sg2" in capsys.readouterr().err
    assert main(["generators", "curve", str(tmp_path / "nothing")]) == 2
    assert "no such file" in capsys.readouterr().err
