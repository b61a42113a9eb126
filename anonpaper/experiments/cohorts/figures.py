"""The cohort chapter's figures: example images of each phantom with their masks."""

from __future__ import annotations

import numpy as np

from anonpaper.data.phantoms.cxr import FINDINGS, CXRPhantomCohort
from anonpaper.data.phantoms.iris import IrisPhantomCohort
from anonpaper.data.phantoms.retina import RetinaPhantomCohort

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


def plot_cxr_examples(cohort: CXRPhantomCohort, n_patients: int = 3, images_per_patient: int = 4,
                      show_masks: bool = True):
    """Figure: rows = patients (several images each, identity visible), mask outlines of the findings on top.

    Returns:
        matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    table = cohort.table
    counts = table.groupby("patient_id").size()
    patients = counts[counts >= images_per_patient].index[:n_patients].tolist() or counts.index[:n_patients].tolist()
    fig, axes = plt.subplots(len(patients), images_per_patient, figsize=(2.4 * images_per_patient,
                                                                         2.6 * len(patients)), squeeze=False)
    colours = {"effusion": "cyan", "opacity": "orange", "atelectasis": "magenta", "support_devices": "lime",
               "heart": "red"}
    for row_axes, patient in zip(axes, patients):
        indices = np.flatnonzero(table["patient_id"].to_numpy() == patient)[:images_per_patient]
        for axis in row_axes:
            axis.axis("off")
        for axis, index in zip(row_axes, indices):
            axis.imshow(cohort.image(int(index)), cmap="gray", vmin=0, vmax=255)
            if show_masks:
                masks = cohort.masks(int(index))
                for name, colour in colours.items():
                    if masks[name].any():
                        axis.contour(masks[name], levels=[0.5], colors=colour, linewidths=0.6)
            record = table.iloc[int(index)]
            found = [f[:6] for f in FINDINGS if record[f"label_{f}"] == 1]
            axis.set_title(f"{patient[-4:]} #{record['study_index']} {','.join(found)}", fontsize=7)
    fig.tight_layout()
    return fig


def plot_iris_examples(cohort: IrisPhantomCohort, n_identities: int = 4, images_per_identity: int = 4,
                       show_masks: bool = True):
    """Figure: rows = identities (healthy and diseased first), columns = their images, lesion outlined.

    Returns:
        matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    table = cohort.table
    firsts = table.groupby("identity").first()
    diseased = firsts.index[firsts["disease"] == 1].tolist()
    healthy = firsts.index[firsts["disease"] == 0].tolist()
    chosen = (diseased[: (n_identities + 1) // 2] + healthy)[:n_identities]
    fig, axes = plt.subplots(len(chosen), images_per_identity,
                             figsize=(2.2 * images_per_identity, 2.35 * len(chosen)), squeeze=False)
    for row_axes, identity in zip(axes, chosen):
        indices = np.flatnonzero(table["identity"].to_numpy() == identity)[:images_per_identity]
        for axis in row_axes:
            axis.axis("off")
        for axis, index in zip(row_axes, indices):
            axis.imshow(cohort.image(int(index)), cmap="gray", vmin=0, vmax=255)
            if show_masks:
                masks = cohort.masks(int(index))
                if masks["lesion"].any():
                    axis.contour(masks["lesion"], levels=[0.5], colors="red", linewidths=0.6)
                axis.contour(masks["occlusion"], levels=[0.5], colors="yellow", linewidths=0.4)
            record = table.iloc[int(index)]
            axis.set_title(f"{identity[-8:]} {record['disease_type'] or 'healthy'}", fontsize=7)
    fig.tight_layout()
    return fig
