"""Point labels that do not overlap (anonpaper.experiments.plotting.label_points)."""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from anonpaper.experiments.plotting import label_points  # noqa: E402

pytestmark = pytest.mark.unit


def _boxes(figure, annotations):
    renderer = figure.canvas.get_renderer()
    return [annotation.get_window_extent(renderer) for annotation in annotations]


def test_labels_of_a_tight_cluster_do_not_overlap():
    """Four points within a few label heights of each other (the VS-Snow cluster of the trade-off figure)."""
    figure, axis = plt.subplots(figsize=(5, 4))
    xs, ys = [67.9, 68.4, 67.4, 67.9], [71.6, 72.0, 72.9, 69.9]
    axis.plot(xs, ys, "o")
    axis.set_xlim(45, 76)
    axis.set_ylim(42, 82)
    figure.tight_layout()
    labels = ["original", "p=0.1", "p=0.3", "p=0.5"]
    annotations = label_points(axis, xs, ys, labels, fontsize=8)
    assert [annotation.get_text() for annotation in annotations] == labels
    for first, second in itertools.combinations(_boxes(figure, annotations), 2):
        assert not first.overlaps(second), (first, second)
    naive = [axis.annotate(label, (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
             for x, y, label in zip(xs, ys, labels)]
    assert any(first.overlaps(second) for first, second in itertools.combinations(_boxes(figure, naive), 2)), \
        "the same labels at one fixed offset do overlap: the test can fail"
    plt.close(figure)


def test_points_at_one_place_share_a_label_and_nan_points_are_skipped():
    figure, axis = plt.subplots()
    xs, ys = [0.0, 0.0, 0.0, 5.0, np.nan], [68.75, 68.75, 68.75, 70.0, 1.0]
    axis.plot(xs, ys, "o")
    figure.tight_layout()
    annotations = label_points(axis, xs, ys, ["0.25", "0.5", "0.25", "1", "x"], colors=["C0"] * 5)
    assert [annotation.get_text() for annotation in annotations] == ["0.25, 0.5", "1"]
    with pytest.raises(ValueError, match="as many xs, ys and labels"):
        label_points(axis, [0.0], [0.0, 1.0], ["a"])
    plt.close(figure)
