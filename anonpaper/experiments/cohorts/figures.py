"""The cohort chapter's figures: example images of each phantom with their masks."""

from __future__ import annotations

import textwrap

import numpy as np

from anonpaper.data.phantoms.cxr import FINDINGS, CXRPhantomCohort
from anonpaper.data.phantoms.iris import IrisPhantomCohort
from anonpaper.data.phantoms.retina import RetinaPhantomCohort

# Short names of the chest X-ray findings for panel titles (the labels, whether or not they have a mask).
FINDING_NAMES = {"pleural_effusion": "effusion", "lung_opacity": "opacity", "atelectasis": "atelectasis",
                 "cardiomegaly": "cardiomegaly", "support_devices": "devices"}


def mask_overlay(masks: dict[str, np.ndarray]) -> np.ndarray:
    """uint8 (H, W, 3) colour picture of the masks: arteries red, veins blue, lesions in distinct colours."""
    shape = masks["fov"].shape
    picture = np.zeros(shape + (3,), np.uint8)
    picture[masks["fov"]] = (25, 25, 25)
    colours = {"vein": (60, 90, 255), "artery": (255, 60, 60), "microaneurysm": (255, 255, 0),
               "haemorrhage": (255, 140, 0), "hard_exudate": (0, 255, 120), "cotton_wool": (255, 255, 255),
               "neovascularisation": (255, 0, 255)}
    for name, colour in colours.items():
        if name in masks:
            picture[masks[name]] = colour
    return picture


def plot_retina_examples(cohort: RetinaPhantomCohort, grades: tuple[int, ...] = (0, 1, 2, 3, 4),
                         sexes: tuple[str, ...] = ("F", "M")):
    """A figure of one image and its mask overlay per (grade, sex) present in the cohort.

    Args:
        cohort: A RetinaPhantomCohort (or any cohort with the same columns and masks).
        grades: DR grades, one figure row each.
        sexes: Sexes, two columns (image, masks) each.

    Returns:
        matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(grades), 2 * len(sexes), figsize=(2.2 * 2 * len(sexes), 2.2 * len(grades)),
                                squeeze=False)
    table = cohort.table
    for r, grade in enumerate(grades):
        for c, sex in enumerate(sexes):
            rows = np.flatnonzero((table["dr_grade"].to_numpy() == grade) & (table["sex"].to_numpy() == sex))
            image_axis, mask_axis = axes[r, 2 * c], axes[r, 2 * c + 1]
            if len(rows):
                image_axis.imshow(cohort.image(int(rows[0])))
                mask_axis.imshow(mask_overlay(cohort.masks(int(rows[0]))))
            else:
                image_axis.text(0.5, 0.5, "none", ha="center", va="center")
            image_axis.set_title(f"grade {grade}, {sex}", fontsize=8)
            mask_axis.set_title("masks", fontsize=8)
            for axis in (image_axis, mask_axis):
                axis.set_xticks([])
                axis.set_yticks([])
    figure.tight_layout()
    return figure


def _grayscale_identity_grid(cohort, column: str, groups: list, images_per_group: int, contours: dict[str, tuple],
                             title, show_masks: bool, size: tuple[float, float]):
    """One row per group (patient / identity) of its first images, with mask outlines.

    Args:
        column: Table column that names the group.
        groups: The group values, one figure row each.
        contours: Mask name -> (colour, line width), drawn when the mask is non-empty; a legend under the grid
            names each colour.
        title: ``title(group, table_row) -> str`` for each image (may hold a line break).
        size: (width, height) of one panel in inches.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    table = cohort.table
    figure, axes = plt.subplots(len(groups), images_per_group,
                                figsize=(size[0] * images_per_group, size[1] * len(groups)), squeeze=False)
    for row_axes, group in zip(axes, groups):
        indices = np.flatnonzero(table[column].to_numpy() == group)[:images_per_group]
        for axis in row_axes:
            axis.axis("off")
        for axis, index in zip(row_axes, indices):
            axis.imshow(cohort.image(int(index)), cmap="gray", vmin=0, vmax=255)
            if show_masks:
                masks = cohort.masks(int(index))
                for name, (colour, width) in contours.items():
                    if masks[name].any():
                        axis.contour(masks[name], levels=[0.5], colors=colour, linewidths=width)
            axis.set_title(title(group, table.iloc[int(index)]), fontsize=7)
    if show_masks and contours:
        handles = [Line2D([0], [0], color=colour, linewidth=1.5) for colour, _ in contours.values()]
        figure.legend(handles, [name.replace("_", " ") for name in contours], loc="lower center",
                      ncol=len(contours), fontsize=8, frameon=False, title="outlines", title_fontsize=8)
        figure.tight_layout(rect=(0, 0.06 if len(groups) > 1 else 0.12, 1, 1))
    else:
        figure.tight_layout()
    return figure


def plot_cxr_examples(cohort: CXRPhantomCohort, n_patients: int = 3, images_per_patient: int = 4,
                      show_masks: bool = True):
    """Figure: rows = patients (several images each, identity visible), mask outlines of the findings on top.

    Returns:
        matplotlib Figure.
    """
    counts = cohort.table.groupby("patient_id").size()
    patients = counts[counts >= images_per_patient].index[:n_patients].tolist() or counts.index[:n_patients].tolist()
    contours = {name: (colour, 0.6) for name, colour in (("effusion", "cyan"), ("opacity", "orange"),
                                                        ("atelectasis", "magenta"), ("support_devices", "lime"),
                                                        ("heart", "red"))}

    def title(patient, record) -> str:
        found = [FINDING_NAMES.get(finding, finding) for finding in FINDINGS if record[f"label_{finding}"] == 1]
        return f"patient {patient[-4:]}, image {record['study_index']}\n" + textwrap.fill(", ".join(found) or
                                                                                       "no finding", 32)

    return _grayscale_identity_grid(cohort, "patient_id", patients, images_per_patient, contours, title, show_masks,
                                    (2.4, 2.85))


def plot_iris_examples(cohort: IrisPhantomCohort, n_identities: int = 4, images_per_identity: int = 4,
                       show_masks: bool = True):
    """Figure: rows = identities (healthy and diseased first), columns = their images, lesion outlined.

    Returns:
        matplotlib Figure.
    """
    firsts = cohort.table.groupby("identity").first()
    diseased = firsts.index[firsts["disease"] == 1].tolist()
    healthy = firsts.index[firsts["disease"] == 0].tolist()
    chosen = (diseased[: (n_identities + 1) // 2] + healthy)[:n_identities]
    return _grayscale_identity_grid(cohort, "identity", chosen, images_per_identity,
                                    {"lesion": ("red", 0.6), "occlusion": ("yellow", 0.4)},
                                    lambda identity, record: f"{identity[-8:]} {record['disease_type'] or 'healthy'}",
                                    show_masks, (2.2, 2.35))
