"""Per-patient anatomy of the retina phantom: vessel tree, optic disc, fovea, pigmentation and DR lesions.

Everything here lives in the *canonical frame* of a right eye: coordinates ``(x, y)`` in units of the radius of a
45-degree field of view (1 unit = 6.25 mm, so the field is 12.5 mm across), origin at the field centre, x to the
right (nasal for a right eye), y downwards (inferior). A left eye is the mirror image; the mirror and the per-image
pose are applied by the renderer as one affine map, so every image of a patient shows the same anatomy.

Anatomical numbers follow published fundus anatomy and the Messidor DR grading rules: disc about 1.8 x 1.5 mm
(vertically oval), fovea about 2.5 disc diameters temporal and slightly inferior to the disc, four arcades, calibre
splitting ``d1 = d0 / (1 + a**g) ** (1 / g)`` with ``g`` about 2-2.1, bifurcation angle about 75 degrees, veins
wider, darker and more tortuous than arteries, DR lesions by grade (Messidor-like counts), lesions concentrated
temporally and inferiorly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

MICROMETRES_PER_UNIT = 6250.0  # half of a 12.5 mm field
ARTERY, VEIN = 0, 1
LESION_TYPES = ("microaneurysm", "haemorrhage", "hard_exudate", "cotton_wool", "neovascularisation")


@dataclass
class PatientTraits:
    """Latent per-patient traits (the sex effect acts on these).

    Attributes:
        sex: "F" or "M".
        eye: "L" or "R".
        age: Years.
        dr_grade: ICDR grade 0-4.
        artery_calibre: Multiplier of arteriolar diameters (1 = population mean).
        vein_calibre: Multiplier of venular diameters.
        bifurcation_angle: Mean total bifurcation angle of arteries in degrees (veins use the population mean).
        disc_scale: Multiplier of the optic disc size.
        tessellation: Visibility of the choroidal (tessellated) pattern, >= 0.
        pigmentation: Fundus darkness, 0 (light) to 1 (dark).
        arcade_radius: Radius (field-radius units) of the circle around the fovea that the temporal arcades
            follow; smaller = arcades closer to the macula (a narrower temporal arcade angle, as in longer eyes).
        lesion_counts: Number of lesions of each of LESION_TYPES (see :func:`lesion_counts_for_grade`).
    """

    sex: str
    eye: str
    age: float
    dr_grade: int
    artery_calibre: float
    vein_calibre: float
    bifurcation_angle: float
    disc_scale: float
    tessellation: float
    pigmentation: float
    arcade_radius: float = 0.56
    lesion_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LESION_TYPES, 0))


@dataclass
class VesselTree:
    """A vessel tree as polyline segments between bifurcations (canonical frame).

    Attributes:
        segments: List of float64 (n_i, 2) polylines, n_i >= 2.
        diameters: float64 (S,) vessel diameter of each segment, in field-radius units.
        kinds: int8 (S,) ARTERY (0) or VEIN (1).
        bifurcations: float64 (B, 2) branching points.
        bifurcation_diameters: float64 (B, 3) parent and both child diameters.
        bifurcation_angles: float64 (B,) angle between the two children's initial directions, degrees.
        bifurcation_kinds: int8 (B,) ARTERY or VEIN.
        crossings: float64 (C, 2) artery/vein crossing points of vessels of diameter >= ``crossing_min_diameter``.
        trunk_diameters: float64 (8,) diameters of the four arterial then four venous arcade trunks at the disc.
    """

    segments: list[np.ndarray]
    diameters: np.ndarray
    kinds: np.ndarray
    bifurcations: np.ndarray
    bifurcation_diameters: np.ndarray
    bifurcation_angles: np.ndarray
    bifurcation_kinds: np.ndarray
    crossings: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    trunk_diameters: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass
class Lesions:
    """DR lesions of one eye (canonical frame, sizes in field-radius units).

    Attributes:
        microaneurysms: float64 (n, 3) x, y, radius.
        haemorrhages: float64 (n, 5) x, y, semi-axis a, semi-axis b, angle (degrees).
        hard_exudates: float64 (n, 3) x, y, radius.
        cotton_wool: float64 (n, 5) x, y, semi-axis a, semi-axis b, angle (degrees).
        neovascularisation: List of float64 (n_i, 2) fine polylines.
    """

    microaneurysms: np.ndarray
    haemorrhages: np.ndarray
    hard_exudates: np.ndarray
    cotton_wool: np.ndarray
    neovascularisation: list[np.ndarray]

    def counts(self) -> dict[str, int]:
        """Number of lesions of each type (neovascularisation counts fronds)."""
        return {"microaneurysm": len(self.microaneurysms), "haemorrhage": len(self.haemorrhages),
                "hard_exudate": len(self.hard_exudates), "cotton_wool": len(self.cotton_wool),
                "neovascularisation": len(self.neovascularisation)}


@dataclass
class PatientAnatomy:
    """Everything fixed across a patient's images (canonical right-eye frame; mirrored at render time for "L").

    Attributes:
        traits: The latent traits.
        disc_center: (2,) disc centre.
        disc_axes: (2,) horizontal and vertical semi-axes of the disc.
        cup_ratio: Cup-to-disc diameter ratio.
        fovea: (2,) foveal centre.
        tree: The vessel tree.
        lesions: The DR lesions.
        texture: float32 (T, T, 3) background reflectance over the square [-TEXTURE_EXTENT, TEXTURE_EXTENT]^2
            (pigmentation, tessellation, macular pigment; values in (0, 1]).
        base_colour: (3,) RGB reflectance of the fundus background.
    """

    traits: PatientTraits
    disc_center: np.ndarray
    disc_axes: np.ndarray
    cup_ratio: float
    fovea: np.ndarray
    tree: VesselTree
    lesions: Lesions
    texture: np.ndarray
    base_colour: np.ndarray


TEXTURE_EXTENT = 1.3
TEXTURE_SIZE = 160

# Population constants (canonical units unless stated).
DISC_VERTICAL_DIAMETER_MM = 1.8
DISC_HORIZONTAL_DIAMETER_MM = 1.5
ARTERY_TRUNK_UM = 130.0  # temporal arcade artery near the disc
VEIN_TRUNK_UM = 175.0  # temporal arcade vein near the disc (artery/vein ratio about 0.74)
NASAL_TRUNK_FRACTION = 0.72  # nasal arcade trunks are thinner than temporal ones
MIN_DIAMETER_UM = 20.0  # growth stops below this calibre (capillaries are not drawn)
STEP = 0.012  # growth step along a vessel
FOV_GROWTH_LIMIT = 1.12  # vessels grow a little beyond the field so poses never show a vessel ending at the rim
FAZ_RADIUS = 0.05  # foveal avascular zone (about 0.3 mm)
MEAN_BIFURCATION_ANGLE = 75.0


_AR_KERNEL = 0.75 ** np.arange(10)  # truncated AR(1) impulse response: smooth, correlated turning


def _um(value: float) -> float:
    return value / MICROMETRES_PER_UNIT


class _TreeBuilder:
    """Grows one eye's arteries and veins from the disc (iterative, deterministic for a given generator)."""

    def __init__(self, rng: np.random.Generator, disc: np.ndarray, fovea: np.ndarray, traits: PatientTraits,
                 length_ratio: tuple[float, float]):
        self.rng = rng
        self.disc = disc
        self.fovea = fovea
        self.traits = traits
        self.length_ratio = length_ratio
        self.segments: list[np.ndarray] = []
        self.diameters: list[float] = []
        self.kinds: list[int] = []
        self.bif_points: list[np.ndarray] = []
        self.bif_diameters: list[tuple[float, float, float]] = []
        self.bif_angles: list[float] = []
        self.bif_kinds: list[int] = []
        self.min_diameter = _um(MIN_DIAMETER_UM)
        # Veins meander more (larger heading noise) than arteries.
        self.heading_noise = {ARTERY: 0.055, VEIN: 0.085}

    # -- geometry helpers --------------------------------------------------------------------------------------
    def _stop_index(self, points: np.ndarray) -> int | None:
        """First point index outside the growth region or inside the foveal avascular zone, else None."""
        outside = (points[:, 0] ** 2 + points[:, 1] ** 2) > FOV_GROWTH_LIMIT ** 2
        in_faz = ((points[:, 0] - self.fovea[0]) ** 2 + (points[:, 1] - self.fovea[1]) ** 2) < FAZ_RADIUS ** 2
        bad = np.flatnonzero(outside | in_faz)
        bad = bad[bad > 0]
        return int(bad[0]) if len(bad) else None

    def _walk(self, start: np.ndarray, heading: float, length: float, kind: int) -> tuple[np.ndarray, float]:
        """A meandering polyline: heading increments are AR(1) noise, so curvature is smooth (tortuosity)."""
        count = max(2, int(np.ceil(length / STEP)))
        noise = self.rng.normal(0.0, self.heading_noise[kind], count)
        turn = np.convolve(noise, _AR_KERNEL)[:count] * 0.5
        headings = heading + np.cumsum(turn)
        steps = STEP * np.stack([np.cos(headings), np.sin(headings)], axis=1)
        points = np.vstack([start, start + np.cumsum(steps, axis=0)])
        return points, float(headings[-1])

    def _split(self, d0: float, asymmetry: float, kind: int) -> tuple[float, float, float, float, float]:
        """Children diameters and deviations (radians) of the larger and the smaller child."""
        exponent = self.rng.uniform(2.0, 2.1)
        d1 = d0 / (1.0 + asymmetry ** exponent) ** (1.0 / exponent)
        d2 = asymmetry * d1
        mean_angle = self.traits.bifurcation_angle if kind == ARTERY else MEAN_BIFURCATION_ANGLE
        total = np.deg2rad(np.clip(self.rng.normal(mean_angle, 6.0), 45.0, 110.0))
        # The thinner child deviates more (minimum-work branching): shares proportional to the other's area.
        theta1 = total * asymmetry ** 2 / (1.0 + asymmetry ** 2)
        theta2 = total - theta1
        return d1, d2, theta1, theta2, float(np.rad2deg(total))

    def _add_segment(self, points: np.ndarray, diameter: float, kind: int) -> None:
        self.segments.append(points)
        self.diameters.append(diameter)
        self.kinds.append(kind)

    def _add_bifurcation(self, point, d0, d1, d2, angle, kind) -> None:
        self.bif_points.append(np.asarray(point, float))
        self.bif_diameters.append((d0, d1, d2))
        self.bif_angles.append(angle)
        self.bif_kinds.append(kind)

    # -- growth ------------------------------------------------------------------------------------------------
    def grow_branch(self, start: np.ndarray, heading: float, diameter: float, kind: int) -> None:
        """Recursive (stack-based) growth of a free branch with Murray-type splitting at each segment end."""
        stack = [(start, heading, diameter)]
        while stack:
            origin, direction, d0 = stack.pop()
            length = d0 * self.rng.uniform(*self.length_ratio)
            points, end_heading = self._walk(origin, direction, length, kind)
            stop = self._stop_index(points)
            if stop is not None:
                self._add_segment(points[:stop + 1], d0, kind)
                continue
            self._add_segment(points, d0, kind)
            asymmetry = self.rng.uniform(0.7, 1.0)
            d1, d2, theta1, theta2, total = self._split(d0, asymmetry, kind)
            if d2 < self.min_diameter:
                # The smaller child would be a capillary: the vessel just continues, slightly thinner.
                if d1 >= self.min_diameter:
                    stack.append((points[-1], end_heading, d1))
                continue
            self._add_bifurcation(points[-1], d0, d1, d2, total, kind)
            side = 1.0 if self.rng.random() < 0.5 else -1.0
            stack.append((points[-1], end_heading + side * theta1, d1))
            stack.append((points[-1], end_heading - side * theta2, d2))

    def grow_arcade(self, heading: float, diameter: float, kind: int, superior: bool, temporal: bool) -> None:
        """An arcade trunk steered around the macula (temporal) or outwards (nasal), shedding side branches."""
        point = self.disc.copy()
        # The patient's arcade radius with a little per-arcade variation (the four arcades are not symmetric).
        arc_radius = self.traits.arcade_radius + self.rng.uniform(-0.03, 0.03)
        travelled = 0.0
        side_toggle = 1.0
        d0 = diameter
        while d0 >= self.min_diameter * 1.5 and travelled < 2.2:
            segment_length = self.rng.uniform(0.1, 0.2)
            count = max(2, int(np.ceil(segment_length / STEP)))
            noise = self.rng.normal(0, self.heading_noise[kind], count).tolist()
            # Plain-float loop: steering depends on the current position, so it cannot be vectorised, and
            # Python floats are far cheaper than tiny numpy arrays here.
            px, py = float(point[0]), float(point[1])
            fx, fy = float(self.fovea[0]), float(self.fovea[1])
            xs, ys = [px], [py]
            for jitter in noise:
                if temporal:
                    ox, oy = px - fx, py - fy
                    radius = math.hypot(ox, oy) + 1e-9
                    rx, ry = ox / radius, oy / radius
                    tx, ty = (ry, -rx) if superior else (-ry, rx)
                    # Pull toward a circle around the fovea that widens once the arcade has passed above or
                    # below it, so the trunk leaves the field temporally instead of orbiting the macula.
                    target_radius = arc_radius + 0.6 * max(0.0, travelled - 0.7)
                    pull_in = 1.2 * (radius - target_radius) / arc_radius
                    target = math.atan2(ty - pull_in * ry, tx - pull_in * rx)
                    pull = 0.25 if travelled > 0.08 else 0.05  # leave the disc vertically first
                else:
                    target = heading
                    pull = 0.05
                heading = heading + pull * ((target - heading + math.pi) % (2 * math.pi) - math.pi) + jitter
                px += STEP * math.cos(heading)
                py += STEP * math.sin(heading)
                travelled += STEP
                xs.append(px)
                ys.append(py)
            point = np.array([px, py])
            polyline = np.column_stack([xs, ys])
            stop = self._stop_index(polyline)
            if stop is not None:
                self._add_segment(polyline[:stop + 1], d0, kind)
                return
            self._add_segment(polyline, d0, kind)
            # A side branch: strongly asymmetric split, the trunk keeps its course.
            asymmetry = self.rng.uniform(0.25, 0.65)
            d1, d2, theta1, theta2, total = self._split(d0, asymmetry, kind)
            if d2 >= self.min_diameter:
                self._add_bifurcation(point, d0, d1, d2, total, kind)
                self.grow_branch(point, heading + side_toggle * theta2, d2, kind)
                heading = heading - side_toggle * theta1
                side_toggle = -side_toggle
                d0 = d1

    def build(self) -> VesselTree:
        traits = self.traits
        trunks = []
        for kind, trunk_um, calibre in ((ARTERY, ARTERY_TRUNK_UM, traits.artery_calibre),
                                        (VEIN, VEIN_TRUNK_UM, traits.vein_calibre)):
            for superior in (True, False):
                for temporal in (True, False):
                    sign = -1.0 if superior else 1.0
                    base = np.deg2rad(100.0 if temporal else 55.0)
                    # Arteries and veins leave the disc a few degrees apart so they do not overlap.
                    jitter = np.deg2rad(self.rng.normal(0, 5) + (6.0 if kind == VEIN else -6.0))
                    heading = sign * (base + (jitter if temporal else -jitter))
                    diameter = _um(trunk_um) * calibre * (1.0 if temporal else NASAL_TRUNK_FRACTION)
                    diameter *= self.rng.uniform(0.93, 1.07)
                    trunks.append(diameter)
                    self.grow_arcade(heading, diameter, kind, superior, temporal)
        return VesselTree(
            segments=self.segments, diameters=np.array(self.diameters), kinds=np.array(self.kinds, np.int8),
            bifurcations=np.array(self.bif_points).reshape(-1, 2),
            bifurcation_diameters=np.array(self.bif_diameters).reshape(-1, 3),
            bifurcation_angles=np.array(self.bif_angles), bifurcation_kinds=np.array(self.bif_kinds, np.int8),
            trunk_diameters=np.array(trunks))


def find_crossings(tree: VesselTree, min_diameter: float, grid: int = 512) -> np.ndarray:
    """Artery/vein crossing points, found by rasterising both centreline sets and intersecting them.

    Args:
        tree: The vessel tree.
        min_diameter: Only vessels at least this wide (field-radius units) count.
        grid: Raster size over [-FOV_GROWTH_LIMIT, FOV_GROWTH_LIMIT]^2.

    Returns:
        float64 (C, 2) crossing points (centroids of the overlap blobs), canonical frame.
    """
    scale = (grid - 1) / (2 * FOV_GROWTH_LIMIT)
    layers = []
    for kind in (ARTERY, VEIN):
        canvas = np.zeros((grid, grid), np.uint8)
        lines = [np.round((seg + FOV_GROWTH_LIMIT) * scale * 16).astype(np.int32)
                 for seg, d, k in zip(tree.segments, tree.diameters, tree.kinds) if k == kind and d >= min_diameter]
        if lines:
            cv2.polylines(canvas, lines, False, 1, 1, cv2.LINE_8, shift=4)
        layers.append(canvas)
    overlap = cv2.dilate(layers[0], np.ones((3, 3), np.uint8)) & cv2.dilate(layers[1], np.ones((3, 3), np.uint8))
    count, _, _, centroids = cv2.connectedComponentsWithStats(overlap, connectivity=8)
    if count <= 1:
        return np.zeros((0, 2))
    return centroids[1:] / scale - FOV_GROWTH_LIMIT


def _sample_positions(rng: np.random.Generator, count: int, fovea: np.ndarray, disc: np.ndarray,
                      disc_radius: float, radius: float = 0.92) -> np.ndarray:
    """Lesion positions: inside the field, off the disc, denser temporally, inferiorly and near the macula."""
    chosen: list[np.ndarray] = []
    while len(chosen) < count:
        candidates = rng.uniform(-radius, radius, (max(4 * count, 16), 2))
        inside = (np.hypot(candidates[:, 0], candidates[:, 1]) < radius) & \
                 (np.hypot(*(candidates - disc).T) > 1.3 * disc_radius)
        candidates = candidates[inside]
        weight = np.exp(-np.hypot(*(candidates - fovea).T) / 0.55)
        weight *= np.where(candidates[:, 1] > fovea[1], 1.5, 1.0)  # inferior
        weight *= np.where(candidates[:, 0] < disc[0] - disc_radius, 1.3, 0.7)  # temporal of the disc
        keep = rng.random(len(candidates)) < weight / weight.max()
        chosen.extend(candidates[keep])
    return np.array(chosen[:count]).reshape(-1, 2)


def lesion_counts_for_grade(rng: np.random.Generator, grade: int) -> dict[str, int]:
    """Lesion counts for an ICDR grade (Messidor-like grading rules).

    Grade 0: none. 1: 1-5 microaneurysms only. 2: 6-14 microaneurysms or 1-4 haemorrhages, some exudates.
    3: >= 15 microaneurysms or >= 5 haemorrhages, exudates, cotton-wool spots. 4: as 3 plus neovascularisation.
    """
    counts = dict.fromkeys(LESION_TYPES, 0)
    if grade == 1:
        counts["microaneurysm"] = int(rng.integers(1, 6))
    elif grade == 2:
        counts["microaneurysm"] = int(rng.integers(6, 15))
        counts["haemorrhage"] = int(rng.integers(1, 5))
        counts["hard_exudate"] = int(rng.integers(0, 25)) if rng.random() < 0.6 else 0
        counts["cotton_wool"] = int(rng.integers(0, 2))
    elif grade >= 3:
        counts["microaneurysm"] = int(rng.integers(15, 31))
        counts["haemorrhage"] = int(rng.integers(5, 16))
        counts["hard_exudate"] = int(rng.integers(15, 60))
        counts["cotton_wool"] = int(rng.integers(1, 5))
        if grade == 4:
            counts["neovascularisation"] = int(rng.integers(1, 4))
    return counts


def make_lesions(rng: np.random.Generator, counts: dict[str, int], fovea: np.ndarray, disc: np.ndarray,
                 disc_radius: float,
                 tree: VesselTree) -> Lesions:
    """Place the lesions of one eye (counts per type from :func:`lesion_counts_for_grade`)."""
    n = counts["microaneurysm"]
    # Microaneurysms: < 125 um across.
    microaneurysms = np.column_stack([_sample_positions(rng, n, fovea, disc, disc_radius),
                                      _um(rng.uniform(25, 60, n))])
    n = counts["haemorrhage"]
    semi_a = _um(rng.uniform(90, 300, n))
    haemorrhages = np.column_stack([_sample_positions(rng, n, fovea, disc, disc_radius), semi_a,
                                    semi_a * rng.uniform(0.5, 1.0, n), rng.uniform(0, 180, n)])
    # Hard exudates: 20-500 um, yellow, in clusters or circinate rings within about 2 disc diameters of the fovea.
    exudates = []
    remaining = counts["hard_exudate"]
    while remaining > 0:
        size = min(remaining, int(rng.integers(5, 20)))
        angle = rng.uniform(0, 2 * np.pi)
        center = fovea + rng.uniform(0.06, 0.35) * np.array([np.cos(angle), np.sin(angle)])
        if rng.random() < 0.4:
            ring_radius = rng.uniform(0.04, 0.1)
            theta = rng.uniform(0, 2 * np.pi, size)
            points = center + ring_radius * np.column_stack([np.cos(theta), np.sin(theta)])
            points += rng.normal(0, ring_radius * 0.12, (size, 2))
        else:
            points = center + rng.normal(0, 0.03, (size, 2))
        exudates.append(np.column_stack([points, _um(rng.uniform(20, 110, size))]))
        remaining -= size
    hard_exudates = np.vstack(exudates) if exudates else np.zeros((0, 3))
    # Cotton-wool spots: 1/4-1/2 disc diameter, near the arcades (on a trunk-sized vessel, slightly offset).
    n = counts["cotton_wool"]
    big = [seg for seg, d in zip(tree.segments, tree.diameters) if d > _um(60)]
    spots = []
    disc_diameter = 2 * disc_radius
    for _ in range(n):
        seg = big[int(rng.integers(len(big)))]
        point = seg[int(rng.integers(len(seg)))] + rng.normal(0, 0.03, 2)
        major = rng.uniform(0.25, 0.5) * disc_diameter / 2
        spots.append([point[0], point[1], major, major * rng.uniform(0.5, 0.9), rng.uniform(0, 180)])
    cotton_wool = np.array(spots).reshape(-1, 5)
    # Neovascularisation: tufts of fine tortuous loops at the disc (NVD) or along an arcade (NVE).
    fronds = []
    for _ in range(counts["neovascularisation"]):
        if rng.random() < 0.5:
            center = disc + rng.normal(0, disc_radius * 0.6, 2)
        else:
            seg = big[int(rng.integers(len(big)))]
            center = seg[int(rng.integers(len(seg)))]
        for _loop in range(int(rng.integers(3, 7))):
            count = int(rng.integers(10, 22))
            turn = rng.normal(0.45, 0.35, count) * (1 if rng.random() < 0.5 else -1)
            headings = rng.uniform(0, 2 * np.pi) + np.cumsum(turn)
            steps = 0.008 * np.column_stack([np.cos(headings), np.sin(headings)])
            fronds.append(np.vstack([center, center + np.cumsum(steps, axis=0)]))
    return Lesions(microaneurysms, haemorrhages, hard_exudates, cotton_wool, fronds)


def make_texture(rng: np.random.Generator, traits: PatientTraits, fovea: np.ndarray) -> np.ndarray:
    """Background reflectance field (multiplicative, values in (0, 1]) over the texture square, float32 (T, T, 3).

    Pigmentation darkens mostly green and blue; the tessellation is a band-pass network of darker choroidal
    interstices; macular pigment darkens the fovea.
    """
    from anonpaper.data.phantoms.drawing import smooth_noise

    size = TEXTURE_SIZE
    axis = np.linspace(-TEXTURE_EXTENT, TEXTURE_EXTENT, size, dtype=np.float32)
    xx, yy = np.meshgrid(axis, axis)
    coarse = smooth_noise(rng, (size, size), cells=4, octaves=2)
    fine = smooth_noise(rng, (size, size), cells=26, octaves=1)
    # Choroidal interstices: thin dark ridges where band-pass noise crosses zero.
    ridges = np.exp(-(fine / 0.25) ** 2)
    tess = 0.45 * traits.tessellation * ridges
    macula = np.exp(-((xx - fovea[0]) ** 2 + (yy - fovea[1]) ** 2) / (2 * 0.11 ** 2))
    texture = np.empty((size, size, 3), np.float32)
    channel_darkening = (0.25, 0.55, 0.6)  # pigment absorbs green/blue more than red
    for channel in range(3):
        level = 1.0 - channel_darkening[channel] * traits.pigmentation
        texture[..., channel] = level * (1.0 + 0.05 * coarse) * (1.0 - (0.45, 0.35, 0.3)[channel] * tess)
        texture[..., channel] *= 1.0 - (0.18, 0.35, 0.4)[channel] * macula
    return np.clip(texture, 0.02, 1.2)


def make_anatomy(seed: int, traits: PatientTraits,
                 length_ratio: tuple[float, float] = (16.0, 32.0)) -> PatientAnatomy:
    """Generate a patient's anatomy (canonical right-eye frame) from a seed and latent traits.

    Args:
        seed: Patient seed (non-negative int); the anatomy is a deterministic function of (seed, traits).
        traits: Latent traits (sex, grade, calibres, ...).
        length_ratio: Range of segment length / diameter ratios of free branches (controls vessel density).

    Returns:
        The PatientAnatomy.
    """
    rng = np.random.default_rng(seed)
    disc_axes = np.array([_um(DISC_HORIZONTAL_DIAMETER_MM * 500), _um(DISC_VERTICAL_DIAMETER_MM * 500)])
    disc_axes = disc_axes * traits.disc_scale
    disc_center = np.array([0.56 + rng.normal(0, 0.02), -0.02 + rng.normal(0, 0.02)])
    disc_diameter = 2 * disc_axes[1]
    angle = np.deg2rad(rng.normal(7.0, 2.0))  # fovea slightly inferior
    distance = disc_diameter * rng.normal(2.5, 0.12)
    fovea = disc_center + distance * np.array([-np.cos(angle), np.sin(angle)])
    tree = _TreeBuilder(rng, disc_center, fovea, traits, length_ratio).build()
    tree.crossings = find_crossings(tree, min_diameter=_um(50))
    if len(tree.crossings):
        # Drop the disc itself, where all trunks start together (not crossings in the anatomical sense).
        far = np.hypot(*(tree.crossings - disc_center).T) > 1.2 * disc_axes[1]
        tree.crossings = tree.crossings[far]
    lesions = make_lesions(rng, traits.lesion_counts, fovea, disc_center, float(disc_axes.mean()), tree)
    texture = make_texture(rng, traits, fovea)
    base = np.array([0.86, 0.40, 0.17]) * rng.uniform(0.95, 1.05, 3)
    return PatientAnatomy(traits=traits, disc_center=disc_center, disc_axes=disc_axes,
                          cup_ratio=float(rng.uniform(0.25, 0.5)), fovea=fovea, tree=tree, lesions=lesions,
                          texture=texture, base_colour=base)
