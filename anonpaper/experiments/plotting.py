"""Figure helpers shared by the chapters: point labels that do not overlap.

:func:`label_points` places a text label beside each point of a scatter plot so that no two labels overlap, no label
covers another point and every label stays inside the axes where possible; points drawn at the same place share one
label (``"0.25, 0.5, 0.75"``) instead of printing their labels on top of each other.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

# Offsets (points) tried around a point, nearest first: right-above, right-below, left-above, left-below, then
# further out in the same directions (with a leader line back to the point).
_OFFSETS = ((5, 4), (5, -4), (-5, 4), (-5, -4), (0, 9), (0, -9), (12, 12), (12, -12), (-12, 12), (-12, -12),
            (22, 4), (-22, 4), (22, -16), (-22, -16), (0, 22), (0, -22), (30, 24), (-30, 24), (30, -28), (-30, -28))


def _overlap(first, second) -> float:
    """Overlapping area of two matplotlib Bboxes (display pixels)."""
    width = min(first.x1, second.x1) - max(first.x0, second.x0)
    height = min(first.y1, second.y1) - max(first.y0, second.y0)
    return max(width, 0.0) * max(height, 0.0)


def label_points(axis, xs: Sequence[float], ys: Sequence[float], labels: Sequence[str],
                 colors: Sequence[str] | str | None = None, fontsize: float = 7, merge_pixels: float = 4.0) -> list:
    """Label the points ``(xs[i], ys[i])`` of ``axis`` with ``labels[i]`` without overlaps.

    Call it after the figure's layout is final (after ``tight_layout``): positions are measured in display pixels.
    Points closer than ``merge_pixels`` share one label (their labels joined by ``", "``, in the order given).
    Each label takes the first offset of a fixed list (nearest first) at which it overlaps no label placed
    before it, covers no other point and stays inside the axes; when none is free, the one with the least
    overlap. A label placed away from its point gets a thin leader line.

    Args:
        axis: The matplotlib Axes holding the points.
        xs, ys: Point coordinates in data units (NaN points are skipped).
        labels: One text per point.
        colors: One colour per point, one for all, or None (black).
        fontsize: Label size in points.
        merge_pixels: Points this close (display pixels) share a label.

    Returns:
        The matplotlib Annotation objects, one per label drawn.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import matplotlib.pyplot as plt
        >>> figure, axis = plt.subplots()
        >>> _ = axis.plot([0, 0, 1], [0, 0, 1], "o")
        >>> [text.get_text() for text in label_points(axis, [0, 0, 1], [0, 0, 1], ["a", "b", "c"])]
        ['a, b', 'c']
        >>> plt.close(figure)
    """
    count = len(labels)
    if not (len(xs) == len(ys) == count):
        raise ValueError(f"label_points needs as many xs, ys and labels; got {len(xs)}, {len(ys)}, {count}")
    if colors is None or isinstance(colors, str):
        colors = [colors or "black"] * count
    figure = axis.figure
    get_renderer = getattr(figure.canvas, "get_renderer", None)
    renderer = get_renderer() if get_renderer is not None else figure._get_renderer()
    pixels = axis.transData.transform(np.column_stack([np.asarray(xs, float), np.asarray(ys, float)]))
    groups: list[list[int]] = []
    for index in range(count):
        if not np.isfinite(pixels[index]).all():
            continue
        for group in groups:
            if np.hypot(*(pixels[group[0]] - pixels[index])) <= merge_pixels:
                group.append(index)
                break
        else:
            groups.append([index])
    frame = axis.get_window_extent(renderer)
    point_boxes = [(x - 3, y - 3, x + 3, y + 3) for x, y in pixels[[group[0] for group in groups]]]
    placed: list = []
    annotations = []
    for number, group in enumerate(groups):
        first = group[0]
        text = ", ".join(dict.fromkeys(str(labels[index]) for index in group))
        best = None
        for dx, dy in _OFFSETS:
            far = abs(dx) > 8 or abs(dy) > 8
            annotation = axis.annotate(
                text, (xs[first], ys[first]), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                color=colors[first], ha="left" if dx > 0 else ("right" if dx < 0 else "center"),
                va="bottom" if dy > 0 else "top",
                arrowprops={"arrowstyle": "-", "color": colors[first], "lw": 0.5, "shrinkA": 0, "shrinkB": 3}
                if far else None)
            box = annotation.get_window_extent(renderer)
            cost = sum(_overlap(box, other) for other in placed)
            cost += sum(_overlap(box, type(box).from_extents(*extent)) for position, extent in enumerate(point_boxes)
                        if position != number)
            outside = box.width * box.height - _overlap(box, frame)
            cost += 2 * outside
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, annotation, box)
            else:
                annotation.remove()
            if cost == 0:
                break
        placed.append(best[2])
        annotations.append(best[1])
    return annotations
