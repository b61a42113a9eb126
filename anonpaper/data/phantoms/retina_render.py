"""Rendering of one fundus image of the retina phantom from a patient's anatomy and an acquisition.

The pose (rotation, scale, translation, and the left-eye mirror) is one affine map from the canonical anatomy frame
to pixels, so rendering happens directly at the target size. Vessels are drawn from distance fields to their
rasterised centrelines (OpenCV), which gives every pixel its distance to the nearest centreline and that vessel's
radius, hence a cylindrical absorption profile with a central light reflex and sub-pixel widths, without
per-pixel Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

from anonpaper.data.phantoms.retina_anatomy import (
    ARTERY, MICROMETRES_PER_UNIT, TEXTURE_EXTENT, TEXTURE_SIZE, VEIN, PatientAnatomy)

FOV_RADIUS_FRACTION = 0.47  # the circular field's radius as a fraction of the image side
MASK_NAMES = ("fov", "vessel", "artery", "vein", "microaneurysm", "haemorrhage", "hard_exudate", "cotton_wool",
              "neovascularisation")
# Absorption per unit optical density in R, G, B: vessels absorb green most (why green shows vessels best);
# veins carry less oxygenated blood, hence darker, especially in red.
ABSORPTION = {ARTERY: np.array([0.22, 0.95, 0.75], np.float32), VEIN: np.array([0.55, 1.25, 0.95], np.float32)}
BLOOD_LESION_ABSORPTION = np.array([0.6, 1.5, 1.1], np.float32)
REFLEX_STRENGTH = {ARTERY: 0.22, VEIN: 0.1}  # arteries show the stronger central light reflex
RADIUS_BUCKETS_PX = (0.0, 1.2, 3.0, np.inf)  # vessels of similar size share one distance field


@dataclass
class Acquisition:
    """Per-image acquisition parameters (all dimensionless unless stated).

    Attributes:
        rotation_deg: In-plane rotation of the eye, degrees.
        scale: Magnification relative to a 45-degree field.
        shift_x: Horizontal translation as a fraction of the image side.
        shift_y: Vertical translation as a fraction of the image side.
        brightness: Global illumination gain.
        gradient_x: Linear illumination slope across the field (fraction per field radius), horizontal.
        gradient_y: The same, vertical.
        colour_r: Red channel gain.
        colour_g: Green channel gain.
        colour_b: Blue channel gain.
        gamma: Display gamma applied to the 0-1 image (output = input ** (1 / gamma)).
        blur_sigma: Gaussian optical blur in pixels of a 512-pixel image (scaled with size).
        noise_std: Standard deviation of additive sensor noise, on the 0-1 scale.
        vignetting: Relative illumination loss at the field rim (0 = none).
        noise_seed: Seed of the sensor noise.
    """

    rotation_deg: float = 0.0
    scale: float = 1.0
    shift_x: float = 0.0
    shift_y: float = 0.0
    brightness: float = 1.0
    gradient_x: float = 0.0
    gradient_y: float = 0.0
    colour_r: float = 1.0
    colour_g: float = 1.0
    colour_b: float = 1.0
    gamma: float = 1.0
    blur_sigma: float = 0.5
    noise_std: float = 0.01
    vignetting: float = 0.2
    noise_seed: int = 0


@dataclass
class RenderedFundus:
    """One rendered image with its ground truth.

    Attributes:
        image: uint8 (S, S, 3) RGB.
        masks: bool (S, S) arrays keyed by MASK_NAMES.
        keypoints: float32 (N, 2) pixel coordinates (x = column, y = row) keyed by "bifurcation" and "crossing";
            "bifurcation_kind" holds int8 (N,) 0 artery / 1 vein.
        affine: float64 (2, 3) map from the canonical anatomy frame to pixel coordinates.
    """

    image: np.ndarray
    masks: dict[str, np.ndarray]
    keypoints: dict[str, np.ndarray]
    affine: np.ndarray


def pose_affine(size: int, eye: str, acquisition: Acquisition) -> np.ndarray:
    """The (2, 3) affine map from canonical anatomy coordinates to pixel coordinates (x = column, y = row)."""
    radius = FOV_RADIUS_FRACTION * size * acquisition.scale
    angle = np.deg2rad(acquisition.rotation_deg)
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    mirror = np.diag([-1.0 if eye == "L" else 1.0, 1.0])
    linear = radius * rotation @ mirror
    center = np.array([(size - 1) / 2 + acquisition.shift_x * size, (size - 1) / 2 + acquisition.shift_y * size])
    return np.hstack([linear, center[:, None]])


def apply_affine(affine: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Map (N, 2) points with a (2, 3) affine."""
    return points @ affine[:, :2].T + affine[:, 2]


@lru_cache(maxsize=8)
def fov_mask(size: int) -> np.ndarray:
    """bool (size, size) circular field of view of the camera (fixed in the image frame). Do not modify."""
    center = (size - 1) / 2
    axis = np.arange(size, dtype=np.float32) - center
    mask = (axis[None, :] ** 2 + axis[:, None] ** 2) <= (FOV_RADIUS_FRACTION * size) ** 2
    mask.setflags(write=False)
    return mask


def _fixed_point(points: np.ndarray) -> np.ndarray:
    """OpenCV fixed-point coordinates (shift=4: 1/16 px) of float pixel coordinates."""
    return (points * 16.0 + 0.5).astype(np.int32)


def _draw_vessels(shape: tuple[int, int], lines: list[np.ndarray], radii: np.ndarray,
                  pixels_per_unit: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Absorption (optical-density-weighted), reflex and mask of one vessel type.

    Args:
        shape: (H, W).
        lines: Pixel-space polylines (n_i, 2).
        radii: Radius in pixels of each polyline.
        pixels_per_unit: Pixels per canonical unit (to turn radii back into micrometres for optical density).

    Returns:
        absorption float32 (H, W) in [0, 1], reflex float32 (H, W) in [0, 1], mask bool (H, W).
    """
    absorption = np.zeros(shape[0] * shape[1], np.float32)
    reflex = np.zeros_like(absorption)
    mask = np.zeros(shape[0] * shape[1], bool)
    order = np.argsort(radii, kind="stable")  # thicker centrelines drawn last win shared pixels
    for low, high in zip(RADIUS_BUCKETS_PX[:-1], RADIUS_BUCKETS_PX[1:]):
        chosen = [index for index in order if low <= radii[index] < high and radii[index] >= 0.2]
        if not chosen:
            continue
        centre = np.full(shape, 255, np.uint8)
        radius_canvas = np.zeros(shape, np.float32)
        fixed = [_fixed_point(lines[index]) for index in chosen]
        cv2.polylines(centre, fixed, False, 0, 1, cv2.LINE_8, shift=4)
        # Radii rounded to 1/16 px share one drawing call (chosen is sorted, so groups are contiguous and thicker
        # groups are drawn last).
        quantised = np.round(radii[chosen] * 16) / 16
        starts = np.flatnonzero(np.r_[True, quantised[1:] != quantised[:-1]])
        for start, stop in zip(starts, np.r_[starts[1:], len(chosen)]):
            cv2.polylines(radius_canvas, fixed[start:stop], False, float(quantised[start]), 1, cv2.LINE_8, shift=4)
        distance, labels = cv2.distanceTransformWithLabels(centre, cv2.DIST_L2, 5, labelType=cv2.DIST_LABEL_PIXEL)
        # Labels number the centreline pixels in raster order, so a flat lookup gives each pixel's vessel radius.
        zero = np.flatnonzero(centre.ravel() == 0)
        lookup = radius_canvas.ravel()[zero]
        reach = min(high, float(radii[chosen].max())) + 1.0
        near = np.flatnonzero(distance.ravel() < reach)
        d = distance.ravel()[near]
        r = lookup[labels.ravel()[near] - 1]
        diameter_um = 2.0 * r / pixels_per_unit * MICROMETRES_PER_UNIT
        density = 1.0 - np.exp(-diameter_um / 90.0)
        thick = r >= 0.5
        outer = np.where(thick, r + 0.5, 0.5)
        profile = np.sqrt(np.clip(1.0 - (d / outer) ** 2, 0.0, 1.0))
        # Sub-pixel vessels keep their integrated absorption by fading rather than widening.
        profile = np.where(thick, profile, profile * 2.0 * r)
        values = (density * profile).astype(np.float32)
        absorption[near] = np.maximum(absorption[near], values)
        glint = np.exp(-(d / np.maximum(0.3 * r, 0.35)) ** 2) * np.clip(r - 1.0, 0.0, 1.0)
        reflex[near] = np.maximum(reflex[near], glint.astype(np.float32))
        mask[near] |= (d <= np.maximum(r, 0.5)) & (r >= 0.25)
    return absorption.reshape(shape), reflex.reshape(shape), mask.reshape(shape)


def _lesion_canvases(anatomy: PatientAnatomy, affine: np.ndarray, size: int,
                     pixels_per_unit: float) -> dict[str, np.ndarray]:
    """uint8 (S, S) coverage canvases (0-255, anti-aliased) of each lesion type."""
    shape = (size, size)
    lesions = anatomy.lesions
    rotation_deg = np.rad2deg(np.arctan2(affine[1, 0], affine[0, 0]))
    mirrored = np.linalg.det(affine[:, :2]) < 0
    canvases = {}

    def ellipses(table: np.ndarray, minimum: float) -> np.ndarray:
        canvas = np.zeros(shape, np.uint8)
        if len(table):
            centres = _fixed_point(apply_affine(affine, table[:, :2]))
            for row, centre in zip(table, centres):
                axes = (int(round(max(row[2] * pixels_per_unit, minimum) * 16)),
                        int(round(max(row[3] * pixels_per_unit, minimum) * 16)))
                angle = (-row[4] if mirrored else row[4]) + rotation_deg
                cv2.ellipse(canvas, (int(centre[0]), int(centre[1])), axes, angle, 0, 360, 255, -1, cv2.LINE_AA,
                            shift=4)
        return canvas

    def circles(table: np.ndarray, minimum: float) -> np.ndarray:
        canvas = np.zeros(shape, np.uint8)
        if len(table):
            centres = _fixed_point(apply_affine(affine, table[:, :2]))
            for row, centre in zip(table, centres):
                radius = int(round(max(row[2] * pixels_per_unit, minimum) * 16))
                cv2.circle(canvas, (int(centre[0]), int(centre[1])), radius, 255, -1, cv2.LINE_AA, shift=4)
        return canvas

    canvases["microaneurysm"] = circles(lesions.microaneurysms, 0.8)
    canvases["haemorrhage"] = ellipses(lesions.haemorrhages, 1.0)
    canvases["hard_exudate"] = circles(lesions.hard_exudates, 0.7)
    canvases["cotton_wool"] = ellipses(lesions.cotton_wool, 1.5)
    neo = np.zeros(shape, np.uint8)
    if lesions.neovascularisation:
        thickness = max(1, int(round(30.0 / MICROMETRES_PER_UNIT * pixels_per_unit)))
        lines = [_fixed_point(apply_affine(affine, frond)) for frond in lesions.neovascularisation]
        cv2.polylines(neo, lines, False, 255, thickness, cv2.LINE_AA, shift=4)
    canvases["neovascularisation"] = neo
    return canvases


def _disc_layer(anatomy: PatientAnatomy, affine: np.ndarray, size: int) -> tuple[tuple[slice, slice], np.ndarray,
                                                                                    np.ndarray]:
    """Optic disc weight (0-1, soft rim) and cup weight in the disc's bounding box (float32 arrays)."""
    inverse = cv2.invertAffineTransform(affine)
    centre = apply_affine(affine, anatomy.disc_center[None])[0]
    reach = float(np.abs(affine[:, :2]).sum(axis=1).max() * anatomy.disc_axes.max() * 1.3) + 2
    x0, x1 = int(max(0, np.floor(centre[0] - reach))), int(min(size, np.ceil(centre[0] + reach)))
    y0, y1 = int(max(0, np.floor(centre[1] - reach))), int(min(size, np.ceil(centre[1] + reach)))
    if x1 <= x0 or y1 <= y0:
        return (slice(0, 0), slice(0, 0)), np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
    xs, ys = np.meshgrid(np.arange(x0, x1, dtype=np.float32), np.arange(y0, y1, dtype=np.float32))
    u = inverse[0, 0] * xs + inverse[0, 1] * ys + inverse[0, 2] - anatomy.disc_center[0]
    v = inverse[1, 0] * xs + inverse[1, 1] * ys + inverse[1, 2] - anatomy.disc_center[1]
    rho = np.sqrt((u / anatomy.disc_axes[0]) ** 2 + (v / anatomy.disc_axes[1]) ** 2)
    pixels_per_unit = float(np.sqrt(abs(np.linalg.det(affine[:, :2]))))
    softness = max(1.5 / (pixels_per_unit * anatomy.disc_axes.mean()), 0.06)
    disc = np.clip((1.0 - rho) / softness + 0.5, 0.0, 1.0)
    cup = np.clip((anatomy.cup_ratio - rho) / (2.5 * softness) + 0.5, 0.0, 1.0)
    return (slice(y0, y1), slice(x0, x1)), disc.astype(np.float32), cup.astype(np.float32)


def render_fundus(anatomy: PatientAnatomy, acquisition: Acquisition, size: int) -> RenderedFundus:
    """Render one fundus image and its ground truth.

    Args:
        anatomy: The patient's anatomy (canonical right-eye frame).
        acquisition: Pose and photometric parameters.
        size: Image side in pixels (64-1024).

    Returns:
        The RenderedFundus (uint8 RGB image, bool masks, keypoints, affine).
    """
    if not 64 <= size <= 1024:
        raise ValueError(f"image size must lie in 64..1024 pixels, got {size}")
    shape = (size, size)
    affine = pose_affine(size, anatomy.traits.eye, acquisition)
    pixels_per_unit = float(np.sqrt(abs(np.linalg.det(affine[:, :2]))))
    fov = fov_mask(size)

    # Background: per-patient reflectance texture warped by the pose, times the base colour.
    step = 2 * TEXTURE_EXTENT / (TEXTURE_SIZE - 1)
    texture_affine = np.hstack([affine[:, :2] * step,
                                (affine[:, :2] @ np.array([-TEXTURE_EXTENT, -TEXTURE_EXTENT]) + affine[:, 2])[:, None]])
    background = cv2.warpAffine(anatomy.texture, texture_affine, (size, size), flags=cv2.INTER_LINEAR,
                                borderMode=cv2.BORDER_REPLICATE)
    image = background * anatomy.base_colour.astype(np.float32)

    # Optic disc: pale, yellow-pink, with a brighter cup.
    box, disc, cup = _disc_layer(anatomy, affine, size)
    if disc.size:
        disc_colour = np.array([0.97, 0.72, 0.45], np.float32)
        cup_colour = np.array([1.0, 0.88, 0.68], np.float32)
        region = image[box]
        region = region * (1 - disc[..., None]) + disc[..., None] * disc_colour
        image[box] = region * (1 - cup[..., None]) + cup[..., None] * cup_colour

    # Vessels.
    tree = anatomy.tree
    lengths = np.array([len(segment) for segment in tree.segments])
    lines = np.split(apply_affine(affine, np.vstack(tree.segments)), np.cumsum(lengths)[:-1])
    radii = tree.diameters * pixels_per_unit / 2
    densities = []
    reflex_total = np.zeros(shape, np.float32)
    vessel_masks = {}
    for kind, name in ((ARTERY, "artery"), (VEIN, "vein")):
        chosen = np.flatnonzero(tree.kinds == kind)
        absorption, reflex, mask = _draw_vessels(shape, [lines[i] for i in chosen], radii[chosen], pixels_per_unit)
        densities.append(absorption)
        reflex_total += REFLEX_STRENGTH[kind] * reflex
        vessel_masks[name] = mask & fov
    absorptions = [ABSORPTION[ARTERY], ABSORPTION[VEIN]]

    # Lesions: blood (microaneurysms, haemorrhages, new vessels) absorbs; exudates and cotton wool scatter.
    canvases = _lesion_canvases(anatomy, affine, size, pixels_per_unit)
    present = {name: bool(canvas.any()) for name, canvas in canvases.items()}
    if present["microaneurysm"] or present["haemorrhage"] or present["neovascularisation"]:
        blood = (np.maximum(canvases["microaneurysm"], canvases["haemorrhage"]).astype(np.float32) * (0.95 / 255)
                 + canvases["neovascularisation"].astype(np.float32) * (0.6 / 255))
        densities.append(blood)
        absorptions.append(BLOOD_LESION_ABSORPTION)
    # Beer-Lambert: per-channel optical depth is a weighted sum of the density planes. Plain float32 ufuncs per
    # channel (not a BLAS product) keep this single-threaded and bit-reproducible.
    attenuation = np.empty(shape + (3,), np.float32)
    depth = np.empty(shape, np.float32)
    for channel in range(3):
        np.multiply(densities[0], -absorptions[0][channel], out=depth)
        for density, absorption in zip(densities[1:], absorptions[1:]):
            depth -= density * absorption[channel]
        np.exp(depth, out=depth)
        attenuation[..., channel] = depth
    image *= attenuation
    image += reflex_total[..., None] * np.array([0.9, 0.9, 0.85], np.float32)
    if present["hard_exudate"]:
        exudate = canvases["hard_exudate"].astype(np.float32)[..., None] * (0.85 / 255)
        image = image * (1 - exudate) + exudate * np.array([0.98, 0.85, 0.3], np.float32)
    if present["cotton_wool"]:
        sigma = max(0.8, 0.012 * pixels_per_unit)
        fluffy = cv2.GaussianBlur(canvases["cotton_wool"].astype(np.float32) / 255, (0, 0), sigma)[..., None] * 0.8
        image = image * (1 - fluffy) + fluffy * np.array([0.95, 0.9, 0.8], np.float32)

    # Acquisition: illumination (gain, gradient, vignetting), colour, blur, noise, gamma, field of view.
    radius_px = FOV_RADIUS_FRACTION * size
    axis = (np.arange(size, dtype=np.float32) - (size - 1) / 2) / radius_px
    illumination = (acquisition.brightness
                    * (1 + acquisition.gradient_x * axis[None, :] + acquisition.gradient_y * axis[:, None])
                    * (1 - acquisition.vignetting * (axis[None, :] ** 2 + axis[:, None] ** 2)))
    colour = np.array([acquisition.colour_r, acquisition.colour_g, acquisition.colour_b], np.float32)
    image *= np.clip(illumination, 0.05, None)[..., None] * colour
    blur = acquisition.blur_sigma * size / 512
    if blur > 0.25:
        image = cv2.GaussianBlur(image, (0, 0), blur)
    if acquisition.noise_std > 0:
        noise_rng = np.random.default_rng(acquisition.noise_seed)
        noise = noise_rng.standard_normal(image.shape, dtype=np.float32)
        noise *= np.float32(acquisition.noise_std)
        image += noise
    np.maximum(image, 0.0, out=image)
    image8 = cv2.convertScaleAbs(image, alpha=255.0)  # rounds and saturates at 255
    table = (255 * (np.arange(256) / 255.0) ** (1.0 / acquisition.gamma) + 0.5).astype(np.uint8)
    image8 = cv2.LUT(image8, table)
    image8[~fov] = 0

    masks = {"fov": fov.copy(), "vessel": vessel_masks["artery"] | vessel_masks["vein"], **vessel_masks}
    for name, canvas in canvases.items():
        masks[name] = (canvas >= 128) & fov
    keypoints = _keypoints(anatomy, affine, size, pixels_per_unit)
    return RenderedFundus(image=image8, masks=masks, keypoints=keypoints, affine=affine)


def _keypoints(anatomy: PatientAnatomy, affine: np.ndarray, size: int, pixels_per_unit: float) -> dict:
    """Visible bifurcations (parent >= 1 px wide, smaller child >= 0.6 px) and crossings inside the field."""
    tree = anatomy.tree
    center = (size - 1) / 2
    limit = FOV_RADIUS_FRACTION * size - 2.0

    def inside(points: np.ndarray) -> np.ndarray:
        return np.hypot(points[:, 0] - center, points[:, 1] - center) < limit

    points = apply_affine(affine, tree.bifurcations)
    diameters_px = tree.bifurcation_diameters * pixels_per_unit
    keep = inside(points) & (diameters_px[:, 0] >= 1.0) & (diameters_px[:, 2] >= 0.6)
    crossings = apply_affine(affine, tree.crossings)
    return {"bifurcation": points[keep].astype(np.float32),
            "bifurcation_kind": tree.bifurcation_kinds[keep].copy(),
            "crossing": crossings[inside(crossings)].astype(np.float32)}
