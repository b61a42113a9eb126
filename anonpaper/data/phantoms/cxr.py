"""Phantom chest radiographs (``phantom-cxr``): longitudinal patients, multi-label pathologies with masks.

Stands in for MIMIC-CXR (paper 3, GMIA) and CheXpert (paper 5) where neither can be downloaded. Each patient has a
fixed anatomy drawn from a patient seed; each image adds positioning, exposure and acquisition variation and the
findings of that study. Images are rendered on demand from per-row seeds.

Geometry: a canonical frame in normalised units (x, y in [0, 1] of the image width/height; radiological convention,
so the patient's right is on the image LEFT and the heart bulges to the image RIGHT). The canonical attenuation map
("whiter = more attenuating") is warped by the per-image affine (rotation, scale, translation), mapped to
intensities (exposure gamma, window), then detector noise, collimation borders and text markers are added.

Patient identity (fixed across a patient's images): thorax width and lung-field shape (lateral wall profile,
apex, costophrenic angles, diaphragm domes), posterior/anterior rib spacing and curvature with per-rib
irregularities, clavicle angles, spine position and scoliosis, heart size/shape/position, vascular lung markings
(a random branching tree per lung), body habitus (soft-tissue width), breast shadows (sex F), gastric bubble, sex,
age.

Per image: rotation (+-3 degrees), scale (+-5 %), translation (+-3 % of the width), inspiration depth (diaphragm
height), exposure gamma, window/contrast, detector blur and noise, collimation borders, "L"/"R" marker and a
"PORTABLE" label on some AP views, support devices (endotracheal tube, central line, nasogastric tube, ECG leads,
pacemaker) and findings.

Findings (multi-label, ``label_<finding>`` columns, CheXpert-style floats 1/0 and -1 uncertain when enabled):
pleural_effusion (fluid at the lung base with a lateral meniscus and blunted costophrenic angle), lung_opacity
(consolidation-like textured blobs), atelectasis (plate-like band opacity with volume loss: raised
hemidiaphragm), cardiomegaly (cardiothoracic ratio >= 0.55 versus <= 0.47 when absent), support_devices. Masks:
``lungs`` (anatomical lung fields, heart excluded, effusion/opacity included), ``heart``, ``effusion``,
``opacity``, ``atelectasis``, ``support_devices``. ``true_<finding>`` columns hold the ground truth that the masks
follow (label 1 <=> mask non-empty; cardiomegaly <=> ``ctr`` >= 0.5), also when ``label_`` shows -1.

Findings evolve along each patient's studies as two-state Markov chains (persistence ``persistence``) with a
per-patient frailty, so the longitudinal structure looks like repeated ICU/outpatient imaging; cardiomegaly is a
patient trait. Patients have 1 to ``max_images`` images; a fraction ``frequent_fraction`` has 20 or more, so the
GMIA filter (>= 20 images per patient) leaves a usable cohort.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pandas as pd

from anonpaper.data.cohort import Cohort
from anonpaper.data.phantoms.drawing import (LRUCache, blob_polygon, derive_seed, draw_polyline, fill_polygon,
                                             gaussian_blur, smooth_noise, to_uint8)
from anonpaper.data.phantoms.base import RenderedPhantomCohort, load_phantom
from anonpaper.data.splits import patient_split

FINDINGS = ("pleural_effusion", "lung_opacity", "atelectasis", "cardiomegaly", "support_devices")
MASK_NAMES = ("lungs", "heart", "effusion", "opacity", "atelectasis", "support_devices")
# Which mask carries each finding (cardiomegaly is read from the heart/lung masks through the CTR).
FINDING_MASK = {"pleural_effusion": "effusion", "lung_opacity": "opacity", "atelectasis": "atelectasis",
                "support_devices": "support_devices"}
CTR_NORMAL = (0.38, 0.47)       # cardiothoracic ratio range without cardiomegaly
CTR_CARDIOMEGALY = (0.55, 0.65)  # and with it; the gap keeps labels unambiguous under per-image jitter

_DEFAULT_PREVALENCE = {"pleural_effusion": 0.3, "lung_opacity": 0.3, "atelectasis": 0.25, "cardiomegaly": 0.25,
                       "support_devices": 0.35}


@dataclass
class CXRPhantomConfig:
    """Options of the chest X-ray phantom (all are ``load_phantom_cxr`` keyword options).

    Attributes:
        n_patients: Number of patients (>= 1).
        image_size: Square image side in pixels, 64..512.
        seed: Master seed; the same config gives the same table and pixels.
        images_per_patient: Fixed number of images per patient, or None for the longitudinal distribution
            (1 + geometric(p=0.3) capped below 20 for most patients; 20..max_images for ``frequent_fraction``).
        frequent_fraction: Fraction of patients with >= 20 images (when ``images_per_patient`` is None).
        max_images: Largest number of images of one patient (>= 20 when frequent patients are wanted).
        prevalence: Stationary per-image prevalence of each finding (keys from ``FINDINGS``; missing keys use
            the defaults); cardiomegaly is a patient trait, so its value is the fraction of PATIENTS (its image
            fraction then depends on how many images the affected patients have).
        persistence: Markov persistence in [0, 1) of findings between consecutive studies of a patient
            (0 = independent images).
        uncertain_labels: If True, write -1 (uncertain, as CheXpert) for some subtle positives and a few negatives.
        uncertain_fraction: Probability that a subtle positive (severity < 0.5) becomes -1; negatives become -1
            with a fifth of it.
        variation: Multiplier (>= 0) of per-image positioning/exposure variation; 1 is the realistic default.
        text_markers: Draw "L"/"R" markers and "PORTABLE" labels.
        collimation: Draw collimation borders on some images.
        split_fractions: Train/val/test fractions of patients.
        cache_size: Rows whose rendering is kept (so image() and masks() of a row render once).
    """

    n_patients: int = 120
    image_size: int = 256
    seed: int = 0
    images_per_patient: int | None = None
    frequent_fraction: float = 0.15
    max_images: int = 48
    prevalence: dict[str, float] = field(default_factory=dict)
    persistence: float = 0.6
    uncertain_labels: bool = False
    uncertain_fraction: float = 0.3
    variation: float = 1.0
    text_markers: bool = True
    collimation: bool = True
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    cache_size: int = 64

    def __post_init__(self) -> None:
        if int(self.n_patients) < 1:
            raise ValueError(f"n_patients must be >= 1, got {self.n_patients}")
        if not 64 <= int(self.image_size) <= 512:
            raise ValueError(f"image_size must lie in 64..512 pixels, got {self.image_size}")
        if self.images_per_patient is not None and int(self.images_per_patient) < 1:
            raise ValueError(f"images_per_patient must be >= 1 or None, got {self.images_per_patient}")
        if not 0.0 <= self.frequent_fraction <= 1.0:
            raise ValueError(f"frequent_fraction must lie in [0, 1], got {self.frequent_fraction}")
        if self.frequent_fraction > 0 and self.images_per_patient is None and self.max_images < 20:
            raise ValueError(f"max_images must be >= 20 when frequent_fraction > 0, got {self.max_images}")
        if self.max_images < 1:
            raise ValueError(f"max_images must be >= 1, got {self.max_images}")
        unknown = set(self.prevalence) - set(FINDINGS)
        if unknown:
            raise ValueError(f"prevalence keys must be in {FINDINGS}, got unknown {sorted(unknown)}")
        merged = {**_DEFAULT_PREVALENCE, **{key: float(value) for key, value in self.prevalence.items()}}
        bad = {key: value for key, value in merged.items() if not 0.0 <= value <= 1.0}
        if bad:
            raise ValueError(f"prevalences must lie in [0, 1], got {bad}")
        self.prevalence = merged
        if not 0.0 <= self.persistence < 1.0:
            raise ValueError(f"persistence must lie in [0, 1), got {self.persistence}")
        if not 0.0 <= self.uncertain_fraction <= 1.0:
            raise ValueError(f"uncertain_fraction must lie in [0, 1], got {self.uncertain_fraction}")
        if self.variation < 0:
            raise ValueError(f"variation must be >= 0, got {self.variation}")
        self.split_fractions = tuple(float(value) for value in self.split_fractions)
        self.image_size = int(self.image_size)
        self.n_patients = int(self.n_patients)


# ----------------------------------------------------------------------------------------------------------------
# Patient anatomy (normalised units)
# ----------------------------------------------------------------------------------------------------------------


def _patient_anatomy(patient_seed: int, cardiomegaly: bool, sex: str) -> dict[str, Any]:
    """Draw a patient's fixed anatomy parameters from its seed (no pixels)."""
    rng = np.random.default_rng(patient_seed)
    male = sex == "M"
    anatomy: dict[str, Any] = {
        "midline": rng.uniform(-0.015, 0.015),
        "y_apex": rng.uniform(0.09, 0.17),
        "w_lat": rng.uniform(0.29, 0.38) + (0.015 if male else -0.01),
        "p_lat": rng.uniform(0.4, 0.75),
        "t_max": rng.uniform(0.72, 0.92),
        "cp_inset": rng.uniform(0.01, 0.035),
        "y_cp": rng.uniform(0.68, 0.81),
        "left_lower": rng.uniform(0.0, 0.03),  # left hemidiaphragm usually lower than the right
        "dome": rng.uniform(0.03, 0.065),
        "m_apex": rng.uniform(0.04, 0.06),
        "m_base": rng.uniform(0.05, 0.08),
        "bow": rng.uniform(0.0, 0.02),
        "lat_wobble": (rng.uniform(-0.025, 0.025, 4), rng.uniform(0, 2 * np.pi, 4)),
        "body_fat": rng.uniform(0.03, 0.14),
        "tissue_seed": int(rng.integers(0, 2 ** 62)),  # low-frequency soft-tissue thickness (shift-robust identity)
        "shoulder": rng.uniform(0.06, 0.12),
        "rib_spacing": rng.uniform(0.05, 0.068),
        "rib_start": rng.uniform(-0.03, 0.0),
        "rib_curvature": rng.uniform(0.8, 2.2),
        "rib_jitter": rng.normal(0, 0.006, (2, 12)),
        "rib_curv_jitter": rng.normal(0, 0.2, (2, 12)),
        "rib_width": rng.uniform(0.012, 0.018),
        "ant_slope": rng.uniform(0.5, 0.9),
        "clavicle_y": rng.uniform(0.11, 0.16),
        "clavicle_angle": rng.uniform(0.15, 0.45),
        "clavicle_len": rng.uniform(0.2, 0.27),
        "spine_width": rng.uniform(0.055, 0.075),
        "scoliosis": (rng.uniform(-0.02, 0.02), rng.uniform(0.5, 2.0), rng.uniform(0, 2 * np.pi)),
        "ctr": rng.uniform(*(CTR_CARDIOMEGALY if cardiomegaly else CTR_NORMAL)),
        "heart_shift": rng.uniform(0.2, 0.4),
        "heart_aspect": rng.uniform(0.75, 0.95),
        "heart_skew": rng.uniform(-0.15, 0.15),
        "aortic_knob": rng.uniform(0.015, 0.03),
        "bubble": (rng.uniform(0.12, 0.2), rng.uniform(0.03, 0.06)),
        "breast": (rng.uniform(0.08, 0.14), rng.uniform(0.05, 0.09)) if not male else None,
        "tree_seed": int(rng.integers(0, 2 ** 62)),
        "texture_seed": int(rng.integers(0, 2 ** 62)),
        "density": rng.uniform(0.85, 1.15),  # soft-tissue attenuation (habitus)
    }
    return anatomy


def _side_x(side: int, u: np.ndarray, midline: float) -> np.ndarray:
    """Convert distance from the midline ``u`` on ``side`` (-1 image left, +1 image right) to x."""
    return 0.5 + midline + side * u


def _lung_polygon(anatomy: dict[str, Any], side: int, inspiration: float, raise_diaphragm: float = 0.0
                  ) -> tuple[np.ndarray, dict[str, float]]:
    """Outline of one lung field in normalised (x, y); also key levels used by the pathologies.

    ``inspiration`` scales the apex-to-costophrenic distance (deeper breath = lower diaphragm);
    ``raise_diaphragm`` lifts this hemidiaphragm (volume loss of atelectasis).
    """
    a = anatomy
    y_apex = a["y_apex"]
    y_cp = y_apex + (a["y_cp"] + (a["left_lower"] if side > 0 else 0.0) - y_apex) * inspiration - raise_diaphragm
    dome = a["dome"] * (0.8 + 0.2 * inspiration)
    y_med = y_cp - 0.5 * dome
    u_cp = a["w_lat"] - a["cp_inset"]
    t = np.linspace(0.0, 1.0, 28)
    amplitudes, phases = a["lat_wobble"]
    wobble = 1.0 + (amplitudes[:, None] * np.sin(np.arange(1, 5)[:, None] * np.pi * t[None] + phases[:, None])
                    ).sum(0)
    rise = np.sin(0.5 * np.pi * np.minimum(t / a["t_max"], 1.0)) ** a["p_lat"]
    taper = np.where(t > a["t_max"], ((t - a["t_max"]) / (1 - a["t_max"])) ** 2, 0.0)
    u_lateral = (a["m_apex"] + (a["w_lat"] - a["m_apex"]) * rise * wobble) - (a["w_lat"] - u_cp) * taper
    y_lateral = y_apex + t * (y_cp - y_apex)
    s = np.linspace(0.0, 1.0, 16)[1:]
    u_diaphragm = u_cp + (a["m_base"] - u_cp) * s
    y_diaphragm = y_cp + (y_med - y_cp) * s - dome * np.sin(np.pi * s ** 0.8)
    r = np.linspace(0.0, 1.0, 12)[1:-1]
    u_medial = a["m_base"] + (a["m_apex"] - a["m_base"]) * r + a["bow"] * np.sin(np.pi * r)
    y_medial = y_med + (y_apex + 0.02 - y_med) * r
    u = np.concatenate([u_lateral, u_diaphragm, u_medial])
    y = np.concatenate([y_lateral, y_diaphragm, y_medial])
    polygon = np.stack([_side_x(side, u, a["midline"]), y], axis=1)
    levels = {"y_apex": y_apex, "y_cp": y_cp, "y_med": y_med, "dome": dome, "u_cp": u_cp,
              "u_max": float(u_lateral.max())}
    return polygon, levels


def _diaphragm_y(levels: dict[str, float], anatomy: dict[str, Any], u: np.ndarray) -> np.ndarray:
    """Height of a hemidiaphragm at distance ``u`` from the midline (same curve as the lung outline)."""
    s = np.clip((levels["u_cp"] - u) / max(levels["u_cp"] - anatomy["m_base"], 1e-6), 0.0, 1.0)
    return levels["y_cp"] + (levels["y_med"] - levels["y_cp"]) * s - levels["dome"] * np.sin(np.pi * s ** 0.8)


def _vascular_tree(seed: int, side: int, anatomy: dict[str, Any]) -> list[tuple[np.ndarray, float]]:
    """Branching vessel polylines from the hilum (normalised (x, y) points and a relative width)."""
    rng = np.random.default_rng(seed)
    hilum_u = rng.uniform(0.08, 0.11)
    hilum_y = rng.uniform(0.40, 0.47)
    branches: list[tuple[np.ndarray, float]] = []
    stack = [(hilum_u, hilum_y, angle, 0.09 * rng.uniform(0.8, 1.2), 1.0, 0)
             for angle in np.sort(rng.uniform(-1.3, 1.4, int(rng.integers(5, 8))))]
    while stack:
        u0, y0, angle, length, width, depth = stack.pop()
        bend = rng.normal(0, 0.25)
        steps = np.linspace(0, 1, 6)
        angles = angle + bend * steps
        du = np.cumsum(np.cos(angles)) * length / 6
        dy = np.cumsum(np.sin(angles)) * length / 6
        points = np.stack([_side_x(side, u0 + du, anatomy["midline"]), y0 + dy], axis=1)
        branches.append((np.vstack([[_side_x(side, np.array(u0), anatomy["midline"]), y0], points]), width))
        if depth < 3:
            for turn in (-1, 1):
                stack.append((u0 + du[-1], y0 + dy[-1], angles[-1] + turn * rng.uniform(0.2, 0.6),
                              length * rng.uniform(0.6, 0.85), width * 0.65, depth + 1))
    return branches


class _PatientLayers:
    """Per-patient, per-size pixel layers that do not change between images (cached)."""

    def __init__(self, anatomy: dict[str, Any], size: int):
        a = anatomy
        shape = (size, size)
        scale = float(size)
        # Body outline: neck, shoulders, then the trunk; outside is air.
        half = a["w_lat"] + a["body_fat"]
        body = np.array([[0.5 - 0.09, -0.05], [0.5 - 0.1, 0.05], [0.5 - half - a["shoulder"], 0.1],
                         [0.5 - half - a["shoulder"] - 0.05, 0.2], [0.5 - half - 0.01, 0.45],
                         [0.5 - half, 1.05], [0.5 + half, 1.05], [0.5 + half + 0.01, 0.45],
                         [0.5 + half + a["shoulder"] + 0.05, 0.2], [0.5 + half + a["shoulder"], 0.1],
                         [0.5 + 0.1, 0.05], [0.5 + 0.09, -0.05]])
        body[:, 0] += a["midline"]
        self.body = gaussian_blur(fill_polygon(shape, body * scale, antialias=True), 0.01 * size)
        self.body *= 1 + 0.12 * smooth_noise(np.random.default_rng(a["tissue_seed"]), shape, 3, octaves=2)
        # Bones: ribs (posterior, brighter; anterior, fainter), clavicles, spine.
        bones = np.zeros(shape, np.float32)
        rib_width = a["rib_width"] * scale
        for side_index, side in enumerate((-1, 1)):
            for k in range(11):
                y_k = a["y_apex"] + a["rib_start"] + (k + 0.3) * a["rib_spacing"] + a["rib_jitter"][side_index, k]
                curvature = a["rib_curvature"] * (1 + a["rib_curv_jitter"][side_index, k])
                u = np.linspace(0.03, a["w_lat"] + 0.015, 20)
                y = y_k - 0.25 * u + curvature * u ** 2
                points = np.stack([_side_x(side, u, a["midline"]), y], axis=1) * scale
                draw_polyline(bones, points, 0.14, rib_width)
                # Anterior rib: from the lateral wall down towards the sternum, fainter and thinner.
                u_ant = np.linspace(a["w_lat"] - 0.01, 0.08, 12)
                y_ant = (y + 0)[-1] + a["ant_slope"] * (a["w_lat"] - u_ant) ** 1.2
                points = np.stack([_side_x(side, u_ant, a["midline"]), y_ant], axis=1) * scale
                draw_polyline(bones, points, 0.06, 0.8 * rib_width)
            u = np.linspace(0.035, 0.035 + a["clavicle_len"], 14)
            y = a["clavicle_y"] - a["clavicle_angle"] * (u - 0.035) + 0.25 * (u - 0.035) ** 2 * 4
            draw_polyline(bones, np.stack([_side_x(side, u, a["midline"]), y], axis=1) * scale, 0.2, 1.3 * rib_width)
        y_spine = np.linspace(0.0, 1.0, 24)
        offset, frequency, phase = a["scoliosis"]
        x_spine = 0.5 + a["midline"] + offset * np.sin(frequency * np.pi * y_spine + phase)
        spine = np.zeros(shape, np.float32)
        draw_polyline(spine, np.stack([x_spine, y_spine], axis=1) * scale, 1.0, a["spine_width"] * scale)
        # Vertebral bodies: periodic disc spaces (darker) along the spine.
        rows = np.arange(size, dtype=np.float32) / scale
        discs = 0.75 + 0.25 * np.cos(2 * np.pi * (rows - a["y_apex"]) / (0.9 * a["rib_spacing"])) ** 8
        self.bones = gaussian_blur(bones, 0.002 * size) + 0.14 * spine * (1 - 0.4 * (discs[:, None] - 0.75) / 0.25)
        # Trachea: an air column down to the carina.
        trachea = np.zeros(shape, np.float32)
        draw_polyline(trachea, np.array([[x_spine[0], 0.0], [0.5 + a["midline"], 0.3]]) * scale, 1.0,
                      0.035 * scale)
        self.trachea = gaussian_blur(trachea, 0.006 * size)
        # Lung markings: branching vessels plus fine parenchymal texture (identity-bearing).
        markings = np.zeros(shape, np.float32)
        for side in (-1, 1):
            for points, width in _vascular_tree(derive_seed(a["tree_seed"], side + 1), side, a):
                draw_polyline(markings, points * scale, 0.5 * width + 0.15, max(1.0, 0.009 * width * scale))
        texture = smooth_noise(np.random.default_rng(a["texture_seed"]), shape, 14, octaves=2)
        self.markings = gaussian_blur(markings, 0.003 * size) + 0.04 * texture
        # Breast shadows (sex F): soft tissue over the lower lateral lung fields.
        breasts = np.zeros(shape, np.float32)
        if a["breast"] is not None:
            radius_x, radius_y = a["breast"]
            for side in (-1, 1):
                center = (_side_x(side, np.array(a["w_lat"] * 0.6), a["midline"]) * scale, 0.7 * scale)
                cv2.ellipse(breasts, (int(center[0]), int(center[1])),
                            (int(radius_x * 1.3 * scale), int(radius_y * 1.6 * scale)), 0, 0, 360, 1.0, -1)
            breasts = gaussian_blur(breasts, 0.03 * size)
        self.breasts = breasts
        self.rows = (np.arange(size, dtype=np.float32) + 0.5) / scale
        self.columns = self.rows.copy()


def _device_polylines(rng: np.random.Generator, anatomy: dict[str, Any], kinds: list[str]
                      ) -> list[tuple[np.ndarray, float, float]]:
    """Support devices as (points (x, y) normalised, value, width normalised)."""
    mid = 0.5 + anatomy["midline"]
    items: list[tuple[np.ndarray, float, float]] = []
    for kind in kinds:
        if kind == "ett":  # endotracheal tube ending above the carina
            tip = rng.uniform(0.2, 0.27)
            y = np.linspace(-0.02, tip, 8)
            x = mid + rng.uniform(-0.01, 0.01) + 0.005 * np.sin(6 * y)
            items.append((np.stack([x, y], 1), 0.8, 0.012))
        elif kind == "central_line":  # from the right subclavian / jugular to the superior vena cava
            start = np.array([0.5 - anatomy["w_lat"] - rng.uniform(0.0, 0.06), rng.uniform(0.08, 0.16)])
            end = np.array([mid - rng.uniform(0.02, 0.05), rng.uniform(0.33, 0.42)])
            bend = np.array([mid - rng.uniform(0.06, 0.12), start[1] + rng.uniform(0.02, 0.05)])
            s = np.linspace(0, 1, 16)[:, None]
            curve = (1 - s) ** 2 * start + 2 * s * (1 - s) * bend + s ** 2 * end
            items.append((curve, 0.9, 0.006))
        elif kind == "ng_tube":  # down the oesophagus, through the diaphragm into the stomach
            y = np.linspace(-0.02, 0.9, 16)
            x = mid + 0.01 + np.where(y > 0.7, (y - 0.7) * rng.uniform(0.4, 0.8), 0.0) + 0.004 * np.sin(9 * y)
            items.append((np.stack([x, y], 1), 0.75, 0.007))
        elif kind == "ecg":  # electrodes (rings) and their leads
            for _ in range(int(rng.integers(3, 6))):
                center = np.array([rng.uniform(0.12, 0.88), rng.uniform(0.08, 0.85)])
                t = np.linspace(0, 2 * np.pi, 14)
                ring = center + 0.018 * np.stack([np.cos(t), np.sin(t)], 1)
                items.append((ring, 0.9, 0.005))
                lead_end = np.array([rng.uniform(0.0, 1.0), rng.choice([-0.02, 1.02])])
                s = np.linspace(0, 1, 10)[:, None]
                sag = np.array([rng.normal(0, 0.1), 0.0])
                items.append(((1 - s) * center + s * lead_end + np.sin(np.pi * s) * sag, 0.7, 0.004))
        elif kind == "pacemaker":  # generator box in the left upper chest and a lead to the right ventricle
            center = np.array([0.5 + anatomy["w_lat"] * rng.uniform(0.5, 0.8), rng.uniform(0.15, 0.22)])
            box = center + np.array([[-0.04, -0.025], [0.04, -0.025], [0.04, 0.025], [-0.04, 0.025]])
            items.append((box, 1.0, -1.0))  # negative width: filled polygon
            s = np.linspace(0, 1, 16)[:, None]
            end = np.array([mid + rng.uniform(0.0, 0.08), rng.uniform(0.55, 0.62)])
            bend = np.array([mid - 0.06, 0.3])
            items.append(((1 - s) ** 2 * center + 2 * s * (1 - s) * bend + s ** 2 * end, 0.9, 0.006))
    return items


_MARKER_FONT = cv2.FONT_HERSHEY_SIMPLEX


def render_cxr(anatomy: dict[str, Any], layers: _PatientLayers, row: dict[str, Any], size: int
               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Render one radiograph and its masks from patient anatomy/layers and a table row's parameters.

    Returns:
        (image uint8 (size, size), masks {name: bool (size, size)} for ``MASK_NAMES``).
    """
    rng = np.random.default_rng(int(row["image_seed"]))
    scale = float(size)
    shape = (size, size)
    inspiration = float(row["inspiration"])
    atelectasis_side = int(row["_atelectasis_side"])
    polygons, levels = {}, {}
    for side in (-1, 1):
        raise_by = 0.05 * float(row["_atelectasis_severity"]) if side == atelectasis_side else 0.0
        polygons[side], levels[side] = _lung_polygon(anatomy, side, inspiration, raise_by)
    lung_field = fill_polygon(shape, [polygons[-1] * scale, polygons[1] * scale]) > 0
    # Heart: width = CTR x thorax width, centred right of the midline, resting on the left hemidiaphragm.
    thorax_left = float(polygons[-1][:, 0].min())
    thorax_right = float(polygons[1][:, 0].max())
    ctr = float(row["ctr"])
    half_width = 0.5 * ctr * (thorax_right - thorax_left)
    center_x = 0.5 * (thorax_left + thorax_right) + anatomy["heart_shift"] * half_width
    bottom = levels[1]["y_med"] + 0.01
    half_height = half_width * anatomy["heart_aspect"]
    center_y = bottom - 0.7 * half_height
    t = np.linspace(0, 2 * np.pi, 48, endpoint=False)
    heart_outline = np.stack([center_x + half_width * np.cos(t),
                              center_y + half_height * np.sin(t) * (1 + anatomy["heart_skew"] * np.cos(t))], 1)
    heart_full = fill_polygon(shape, heart_outline * scale) > 0
    below = layers.rows[:, None] > bottom
    heart = heart_full & ~below
    # Diaphragm/abdomen: everything below either hemidiaphragm curve (soft tissue, no lung).
    columns = layers.columns
    u_right = np.abs(columns - 0.5 - anatomy["midline"])
    diaphragm = np.where(columns < 0.5 + anatomy["midline"], _diaphragm_y(levels[-1], anatomy, u_right),
                         _diaphragm_y(levels[1], anatomy, u_right))
    abdomen = layers.rows[:, None] > diaphragm[None, :]
    lungs_with_heart = lung_field & ~abdomen
    lungs = lungs_with_heart & ~heart

    empty = np.zeros(shape, bool)
    effusion = empty
    attenuation_extra = np.zeros(shape, np.float32)
    # Pleural effusion: fluid in the dependent lung base below a meniscus that climbs the lateral wall.
    if row["true_pleural_effusion"]:
        severity = float(row["_effusion_severity"])
        sides = {0: (-1,), 1: (1,), 2: (-1, 1)}[int(row["_effusion_sides"])]
        fluid = np.zeros(shape, np.float32)
        for side in sides:
            lv = levels[side]
            height = (lv["y_cp"] - lv["y_apex"]) * (0.12 + 0.33 * severity)
            u = np.abs(columns - 0.5 - anatomy["midline"])
            on_side = (columns - 0.5 - anatomy["midline"]) * side > 0
            level = lv["y_cp"] - height * (0.5 + 0.5 * np.clip(u / lv["u_max"], 0, 1) ** 2)  # meniscus
            fluid += ((layers.rows[:, None] > level[None, :]) & on_side[None, :]).astype(np.float32)
        effusion = (fluid > 0) & lungs
        soft = gaussian_blur(effusion.astype(np.float32), 0.008 * size)
        attenuation_extra += (0.27 + 0.08 * severity) * soft
    # Lung opacity / consolidation: textured blobs inside the lungs.
    opacity = empty
    if row["true_lung_opacity"]:
        severity = float(row["_opacity_severity"])
        blobs = np.zeros(shape, np.float32)
        # Centres are drawn among lung-field pixels (away from the heart), so the mask is never empty.
        candidates = np.flatnonzero(lungs)
        for _ in range(int(rng.integers(1, 3))):
            center_y, center_x = np.divmod(int(candidates[rng.integers(len(candidates))]), size)
            radius = rng.uniform(0.06, 0.1) * (0.7 + 0.6 * severity)
            polygon = blob_polygon(rng, (center_x + 0.5, center_y + 0.5),
                                   (radius * scale, radius * rng.uniform(0.7, 1.3) * scale),
                                   rng.uniform(0, np.pi), roughness=0.35)
            fill_polygon(shape, polygon, 1.0, out=blobs)
        opacity = (blobs > 0) & lungs
        texture = 0.75 + 0.25 * smooth_noise(rng, shape, 12)
        soft = gaussian_blur(opacity.astype(np.float32), 0.012 * size)
        attenuation_extra += (0.22 + 0.14 * severity) * soft * texture
    # Atelectasis: plate-like band in a lower zone, plus the raised hemidiaphragm drawn above.
    atelectasis = empty
    if row["true_atelectasis"]:
        severity = float(row["_atelectasis_severity"])
        side = atelectasis_side
        lv = levels[side]
        # Anchor the band above the dome at mid-lung so it crosses aerated lung.
        y0 = float(_diaphragm_y(lv, anatomy, np.array(0.6 * lv["u_max"]))) - rng.uniform(0.04, 0.1)
        u = np.linspace(0.12, lv["u_max"] * 0.95, 10)
        y = y0 + rng.uniform(-0.1, 0.1) * (u - u[0]) + 0.01 * np.sin(rng.uniform(3, 8) * u)
        band = np.zeros(shape, np.float32)
        draw_polyline(band, np.stack([_side_x(side, u, anatomy["midline"]), y], 1) * scale, 1.0,
                      (0.018 + 0.02 * severity) * scale)
        atelectasis = (band > 0.5) & lungs
        attenuation_extra += (0.26 + 0.1 * severity) * gaussian_blur(atelectasis.astype(np.float32), 0.004 * size)
    # Support devices: radio-opaque lines, electrodes, generator.
    devices = np.zeros(shape, np.float32)
    if row["true_support_devices"]:
        kinds = [kind for kind in str(row["devices"]).split("+") if kind]
        for points, value, width in _device_polylines(rng, anatomy, kinds):
            if width < 0:
                fill_polygon(shape, points * scale, value, antialias=True, out=devices)
            else:
                draw_polyline(devices, points * scale, value, max(1.0, width * scale))
    device_mask = devices > 0.3

    # Attenuation map (0 air .. ~1 metal).
    density = anatomy["density"]
    lung_soft = gaussian_blur((lungs_with_heart & ~heart_full).astype(np.float32), 0.006 * size)
    attenuation = 0.5 * density * layers.body
    attenuation -= 0.36 * lung_soft
    attenuation += lung_soft * 0.3 * layers.markings
    attenuation += 0.08 * gaussian_blur(heart.astype(np.float32), 0.004 * size)
    attenuation += layers.bones * layers.body
    attenuation -= 0.12 * layers.trachea
    attenuation += 0.12 * layers.breasts * layers.body
    # Gastric bubble: gas under the left hemidiaphragm (size varies per image).
    bubble_u, bubble_r = anatomy["bubble"]
    bubble_y = float(_diaphragm_y(levels[1], anatomy, np.array(bubble_u))) + bubble_r * 0.9
    bubble = np.zeros(shape, np.float32)
    radius = bubble_r * rng.uniform(0.6, 1.1) * scale
    cv2.ellipse(bubble, (int((0.5 + anatomy["midline"] + bubble_u) * scale), int(bubble_y * scale)),
                (max(1, int(radius * 1.3)), max(1, int(radius * 0.8))), 0, 0, 360, 1.0, -1)
    attenuation -= 0.25 * gaussian_blur(bubble, 0.006 * size) * abdomen
    attenuation += attenuation_extra + devices

    # Positioning: one affine for the image and all masks.
    angle = float(row["rotation_deg"])
    matrix = cv2.getRotationMatrix2D((size / 2.0, size / 2.0), angle, float(row["scale"]))
    matrix[:, 2] += np.array([row["shift_x"], row["shift_y"]], np.float64) * size
    warped = cv2.warpAffine(attenuation, matrix, (size, size), flags=cv2.INTER_LINEAR,
                            borderMode=cv2.BORDER_REPLICATE)
    packed = np.zeros(shape, np.uint8)
    for bit, mask in enumerate((lungs, heart, effusion, opacity, atelectasis, device_mask)):
        packed |= (mask.astype(np.uint8) << bit)
    packed = cv2.warpAffine(packed, matrix, (size, size), flags=cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT,
                            borderValue=0)
    masks = {name: ((packed >> bit) & 1).astype(bool) for bit, name in enumerate(MASK_NAMES)}

    # Detector: window/gamma, blur (MTF), noise.
    image = np.clip((warped - float(row["window_low"])) / (float(row["window_high"]) - float(row["window_low"])),
                    0.0, 1.0) ** float(row["gamma"])
    image = gaussian_blur(image, float(row["blur_px"]) * size / 256.0)
    image += float(row["noise_sigma"]) * rng.standard_normal(shape, dtype=np.float32)
    if row["collimation"]:
        top, bottom_edge, left, right = (np.asarray(row["_collimation_edges"]) * size).astype(int)
        value = 0.97 if row["collimation"] == "white" else 0.02
        image[:top] = value
        image[size - bottom_edge:] = value
        image[:, :left] = value
        image[:, size - right:] = value
    result = to_uint8(image)
    font_scale = 0.5 * size / 256.0
    thickness = max(1, int(round(size / 256.0)))
    if row["marker"]:
        corner = (int(0.06 * size) if row["marker"] == "R" else int(0.88 * size), int(0.1 * size))
        cv2.putText(result, row["marker"], corner, _MARKER_FONT, font_scale * 1.2, 250, thickness, cv2.LINE_AA)
    if row["portable_text"]:
        cv2.putText(result, "PORTABLE", (int(0.55 * size), int(0.95 * size)), _MARKER_FONT, font_scale * 0.8, 240,
                    thickness, cv2.LINE_AA)
    return result, masks


# ----------------------------------------------------------------------------------------------------------------
# Table
# ----------------------------------------------------------------------------------------------------------------

_DEVICE_KINDS = ("ett", "central_line", "ng_tube", "ecg", "pacemaker")


def _images_per_patient(rng: np.random.Generator, config: CXRPhantomConfig) -> int:
    if config.images_per_patient is not None:
        return int(config.images_per_patient)
    if rng.random() < config.frequent_fraction:
        return int(rng.integers(20, max(config.max_images, 20) + 1))
    return int(min(1 + rng.geometric(0.3) - 1, 19, config.max_images))


def _markov_chain(rng: np.random.Generator, count: int, prevalence: float, persistence: float) -> np.ndarray:
    """Binary chain with stationary probability ``prevalence`` and lag-1 correlation ``persistence``."""
    prevalence = float(np.clip(prevalence, 0.0, 1.0))
    stay = prevalence + persistence * (1 - prevalence)  # P(1 | previous 1)
    enter = prevalence * (1 - persistence)  # P(1 | previous 0)
    states = np.zeros(count, bool)
    draws = rng.random(count)
    states[0] = draws[0] < prevalence
    for index in range(1, count):
        states[index] = draws[index] < (stay if states[index - 1] else enter)
    return states


def build_cxr_table(config: CXRPhantomConfig) -> pd.DataFrame:
    """The phantom's table (one row per image), including the private per-row render parameters (``_`` prefix).

    Deterministic in ``config``; see the module docstring for the columns.
    """
    rows: list[dict[str, Any]] = []
    variation = config.variation
    for patient_index in range(config.n_patients):
        patient_seed = derive_seed(config.seed, "cxr-patient", patient_index)
        rng = np.random.default_rng(derive_seed(patient_seed, "table"))
        sex = "M" if rng.random() < 0.5 else "F"
        age0 = float(np.clip(rng.normal(60, 16), 18, 92))
        cardiomegaly = bool(rng.random() < config.prevalence["cardiomegaly"])
        count = _images_per_patient(rng, config)
        frailty = float(np.exp(rng.normal(0, 0.4)))  # patients differ in how often they are ill
        chains = {finding: _markov_chain(rng, count, min(config.prevalence[finding] * frailty, 0.95),
                                         config.persistence)
                  for finding in FINDINGS if finding != "cardiomegaly"}
        days = np.concatenate([[0], np.cumsum(rng.exponential(40.0, count - 1).round() + 1)]).astype(int)
        anatomy = _patient_anatomy(patient_seed, cardiomegaly, sex)
        for study in range(count):
            image_seed = derive_seed(patient_seed, "image", study)
            irng = np.random.default_rng(derive_seed(image_seed, "table"))
            truth = {finding: bool(chains[finding][study]) for finding in chains}
            truth["cardiomegaly"] = cardiomegaly
            devices = ""
            if truth["support_devices"]:
                chosen = [kind for kind, p in zip(_DEVICE_KINDS, (0.45, 0.5, 0.35, 0.5, 0.15)) if irng.random() < p]
                devices = "+".join(chosen or [str(irng.choice(_DEVICE_KINDS))])
            view = "AP" if irng.random() < (0.75 if truth["support_devices"] else 0.3) else "PA"
            collimation = ""
            if config.collimation and irng.random() < 0.5:
                collimation = "white" if irng.random() < 0.7 else "black"
            severities = {finding: float(irng.uniform(0.2, 1.0)) for finding in
                          ("pleural_effusion", "lung_opacity", "atelectasis")}
            window_low = float(0.02 + 0.03 * variation * irng.uniform(-1, 1))
            row: dict[str, Any] = {
                "image_id": f"cxr-p{patient_index:05d}-s{study:03d}",
                "patient_id": f"cxr-p{patient_index:05d}",
                "source": "phantom-cxr",
                "sex": sex,
                "age": round(age0 + days[study] / 365.25, 2),
                "view": view,
                "study_index": study,
                "days_since_first": int(days[study]),
                "image_size": config.image_size,
                "image_seed": image_seed,
                "rotation_deg": float(3.0 * variation * irng.uniform(-1, 1)),
                "scale": float(1 + 0.05 * variation * irng.uniform(-1, 1)),
                "shift_x": float(0.03 * variation * irng.uniform(-1, 1)),
                "shift_y": float(0.03 * variation * irng.uniform(-1, 1)),
                "inspiration": float(1 + 0.07 * variation * irng.uniform(-1, 0.6)),
                "gamma": float(np.exp(0.2 * variation * irng.uniform(-1, 1))),
                "window_low": window_low,
                "window_high": float(0.74 + 0.08 * variation * irng.uniform(-1, 1)),
                "blur_px": float(0.6 + 0.5 * variation * irng.random()),
                "noise_sigma": float(0.01 + 0.02 * variation * irng.random()),
                "collimation": collimation,
                "marker": (str(irng.choice(["L", "R"])) if config.text_markers and irng.random() < 0.8 else ""),
                "portable_text": bool(config.text_markers and view == "AP" and irng.random() < 0.5),
                "devices": devices,
                "ctr": float(np.clip(anatomy["ctr"] + 0.005 * irng.uniform(-1, 1),
                                     *((0.545, 0.66) if cardiomegaly else (0.375, 0.475)))),
                "_effusion_sides": int(irng.choice(3, p=[0.35, 0.35, 0.3])),
                "_effusion_severity": severities["pleural_effusion"],
                "_opacity_severity": severities["lung_opacity"],
                "_atelectasis_severity": severities["atelectasis"] if truth["atelectasis"] else 0.0,
                "_atelectasis_side": int(irng.choice([-1, 1])),
                "_collimation_edges": tuple(float(value) for value in irng.uniform(0.01, 0.07, 4)),
            }
            for finding in FINDINGS:
                row[f"true_{finding}"] = int(truth[finding])
                label = float(truth[finding])
                if config.uncertain_labels:
                    subtle = finding in severities and truth[finding] and severities[finding] < 0.5
                    if (subtle and irng.random() < config.uncertain_fraction) or (
                            not truth[finding] and irng.random() < config.uncertain_fraction / 5):
                        label = -1.0
                row[f"label_{finding}"] = label
            row["label_no_finding"] = float(not any(truth[f] for f in FINDINGS if f != "support_devices"))
            rows.append(row)
    table = pd.DataFrame(rows)
    table["split"] = patient_split(table, config.split_fractions, stratify="true_cardiomegaly", seed=config.seed)
    leading = ["image_id", "patient_id", "split", "source", "sex", "age", "view"]
    return table[leading + [column for column in table.columns if column not in leading]]


class CXRPhantomCohort(RenderedPhantomCohort):
    """Phantom chest radiographs: uint8 (H, W) grayscale images rendered on demand, masks in ``MASK_NAMES``.

    The ``split`` column is a patient-level 70/10/20 split (``patient_split``, stratified by cardiomegaly).
    Columns starting with ``_`` are private render parameters.
    """

    modality = "cxr"
    channels = 1
    mask_names = MASK_NAMES

    def __init__(self, config: CXRPhantomConfig | None = None, name: str = "phantom-cxr"):
        self.config = config or CXRPhantomConfig()
        super().__init__(name, build_cxr_table(self.config))
        self._render_cache = LRUCache(self.config.cache_size)
        self._patient_cache = LRUCache(max(4, min(64, self.config.cache_size)))

    def _patient(self, row: pd.Series) -> tuple[dict[str, Any], _PatientLayers]:
        patient_index = int(str(row["patient_id"]).rsplit("p", 1)[1])
        patient_seed = derive_seed(self.config.seed, "cxr-patient", patient_index)
        anatomy = _patient_anatomy(patient_seed, bool(row["true_cardiomegaly"]), str(row["sex"]))
        size = self.config.image_size
        layers = self._patient_cache.get((patient_seed, size), lambda: _PatientLayers(anatomy, size))
        return anatomy, layers

    def _render(self, row: pd.Series) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        def compute():
            anatomy, layers = self._patient(row)
            return render_cxr(anatomy, layers, row.to_dict(), self.config.image_size)

        return self._render_cache.get(str(row["image_id"]), compute)


def load_phantom_cxr(root: str | Path | None = None, **options: Any) -> Cohort:
    """Registry loader of ``phantom-cxr``: ``options`` are :class:`CXRPhantomConfig` fields; a ``root`` written by
    :func:`anonpaper.data.export.write_cohort` is read instead.

    Raises:
        ValueError: For an unknown option (listing the known ones) or an invalid value.
    """
    return load_phantom("phantom-cxr", CXRPhantomConfig, CXRPhantomCohort, root, options)


# ----------------------------------------------------------------------------------------------------------------
# Cohort-chapter helpers
# ----------------------------------------------------------------------------------------------------------------
