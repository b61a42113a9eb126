"""The generator sweep's table: rows up to equal wall time, the tree check's binding statistic, the widths and
the recipe changes of each variant."""

from __future__ import annotations

import csv
import json

import pytest

from anonpaper.models.stylegan import get_config


def _run(folder, name, config, points, changes="", se=0.01):
    run_dir = folder / (name + changes.replace(" ", "+")) / "fundus-sg2.run"
    run_dir.mkdir(parents=True)
    curve = [{"step": index, "kimg": kimg, "train_seconds": seconds,
              "vessel_skeleton/length_per_piece/generated": lpp, "vessel_skeleton/length_per_piece/real": 30.0,
              "vessel_skeleton/junctions_per_image/generated": junctions,
              "vessel_skeleton/junctions_per_image/real": 8.0, "FD-vessel-unet": 5.0, "labels/distance": None,
              "vessel_skeleton/length_per_piece/relative_difference/se": se,
              "vessel_skeleton/junctions_per_image/relative_difference/se": se}
             for index, (kimg, seconds, lpp, junctions) in enumerate(points)]
    record = {"identity": {"kind": "fundus-sg2", "stylegan_config": config.to_dict()}, "curve": curve,
              "command": f"anonpaper generators train fundus-sg2 --stylegan-config {name} --resolution 32"
                         + "".join(f" --change={item}" for item in changes.split()),
              "sessions": [{"from_kimg": 0.0, "to_kimg": points[-1][0], "torch_threads": 1, "processor": "cpu-x",
                            "commit": "abc"}]}
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


def test_rows_stop_at_equal_wall_time_and_the_closer_tree_wins(tmp_path, load_benchmark, capsys):
    sweep = load_benchmark("generator_sweep")
    narrow = _run(tmp_path, "sg2-tiny", get_config("sg2-tiny"), [(0, 0, 15, 1), (5, 100, 24, 6), (10, 200, 27, 7)])
    wide = _run(tmp_path, "sg2-cpu64", get_config("sg2-cpu64", resolution=32), [(0, 0, 15, 1), (2, 150, 12, 4)])
    output = tmp_path / "sweep.csv"
    assert sweep.main(["--runs", str(narrow), str(wide), "--output", str(output)]) == 0
    rows = list(csv.DictReader(output.open()))
    assert [(row["config"], float(row["kimg"])) for row in rows] == [("sg2-tiny", 0), ("sg2-tiny", 5),
                                                                      ("sg2-cpu64", 0), ("sg2-cpu64", 2)]
    # binding statistic: the larger of |24/30 - 1| = 0.2 and |6/8 - 1| = 0.25
    assert float(rows[1]["tree_distance"]) == pytest.approx(0.25)
    assert float(rows[3]["tree_distance"]) == pytest.approx(0.6)  # |12/30 - 1|
    assert rows[0]["widths"] == "4:32 8:32 16:32 32:16" and rows[1]["threads"] == "1"
    assert rows[0]["labels_distance"] == "" and rows[0]["FD-vessel-unet"] == "5.0"  # not measured: an empty cell
    out = capsys.readouterr().out
    assert "closest vessel trees at equal wall time (150 s): sg2-tiny" in out
    # ... and beyond noise: on sg2-tiny's binding statistic (junctions, -0.25) against sg2-cpu64's -0.5 at 2 kimg
    assert "against sg2-cpu64: junctions per image closer by +0.250 (SE 0.014): closer" in out


def test_a_closest_variant_within_noise_is_said_to_be(tmp_path, load_benchmark, capsys):
    sweep = load_benchmark("generator_sweep")
    config = get_config("sg2-tiny")
    first = _run(tmp_path, "sg2-tiny", config, [(0, 0, 15, 1), (5, 100, 24, 6)], se=0.1)
    second = _run(tmp_path, "sg2-tiny", config, [(0, 0, 15, 1), (5, 100, 23, 6)], changes="r1_gamma=2", se=0.1)
    assert sweep.main(["--runs", str(first), str(second), "--output", str(tmp_path / "sweep.csv")]) == 0
    assert "against sg2-tiny r1_gamma=2: junctions per image closer by +0.000 (SE 0.141): within noise" in (
        capsys.readouterr().out)


def test_a_folder_without_a_run_is_named(tmp_path, load_benchmark):
    sweep = load_benchmark("generator_sweep")
    with pytest.raises(FileNotFoundError, match="no run.json"):
        sweep.main(["--runs", str(tmp_path), "--output", str(tmp_path / "out.csv")])


def test_recipe_variants_are_parsed_labelled_and_kept_apart(tmp_path, load_benchmark, capsys):
    sweep = load_benchmark("generator_sweep")
    assert sweep.parse_variant("sg3t-tiny:generator_lr=0.001,sg3_first_cutoff=4") == (
        "sg3t-tiny", {"generator_lr": 0.001, "sg3_first_cutoff": 4})
    assert sweep.parse_variant("sg2-tiny") == ("sg2-tiny", {})
    assert sweep.variant_folder("sg3t-tiny", {"generator_lr": 0.001}) == "sg3t-tiny+generator_lr=0.001"
    with pytest.raises(ValueError, match="variant 'sg2-tiny:r1_gamma': --change takes NAME=VALUE"):
        sweep.parse_variant("sg2-tiny:r1_gamma")
    config = get_config("sg2-tiny")
    base = _run(tmp_path, "sg2-tiny", config, [(0, 0, 15, 1), (5, 100, 12, 3)])
    slower = _run(tmp_path, "sg2-tiny", config, [(0, 0, 15, 1), (5, 100, 27, 7)], changes="generator_lr=0.001")
    output = tmp_path / "sweep.csv"
    assert sweep.main(["--runs", str(base), str(slower), "--output", str(output)]) == 0
    rows = list(csv.DictReader(output.open()))
    labels = [(row["config"], row["changes"]) for row in rows]
    assert labels[1:3] == [("sg2-tiny", ""), ("sg2-tiny", "generator_lr=0.001")]
    assert "closest vessel trees at equal wall time (100 s): sg2-tiny generator_lr=0.001" in capsys.readouterr().out
    # A table of other columns is not appended to.
    output.write_text("config,resolution\r\n")
    with pytest.raises(ValueError, match="its columns are not this script's"):
        sweep.main(["--runs", str(base), "--output", str(output)])


def test_stylegan3_widths_are_listed_per_layer_by_cutoff(load_benchmark):
    sweep = load_benchmark("generator_sweep")
    assert sweep.widths(get_config("sg3t-tiny", resolution=128)) == "c2:32 c11.3:23 c64:4 c64:4"
    assert sweep.widths(get_config("sg3t-tiny", resolution=128, channel_base=2048)) == "c2:32 c11.3:32 c64:16 c64:16"
