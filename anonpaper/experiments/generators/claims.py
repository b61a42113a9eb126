"""The generators chapter's checks, each decided by the one rule (see :mod:`anonpaper.experiments.claims`).

They are ``phantom-check`` claims: they test whether our generators are good enough for the GAN chapters, not a
paper's result. "Lower than" targets are directional claims; "within a tolerance" targets are equivalence claims on
the (relative) difference with the tolerance, fixed in the config, as the margin. SEs come from bootstrap draws of
both image sets (``Config.bootstrap``) or from the spread over images. Distribution claims are undecided below
``Config.min_eval_images`` images per set; the claims that read the U-Net's features or masks are undecided when the
segmenter misses ``Config.segmenter_min_dice``, and the label claim when the label classifier misses its floor.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from anonpaper.experiments.claims import DECISION_Z, Claim, Instrument, decide
from anonpaper.experiments.generators.config import KINDS, Config
from anonpaper.experiments.generators.pipeline import (FEATURE_MASKS, TREE_STATISTICS, Outcome, learned_population,
                                                       relative_difference)
from anonpaper.metrics.statistics import difference_se

MIN_PROJECTOR_IMAGES = 5  # fewer held-out inversions decide nothing
MIN_MEMORISATION_IMAGES = 20  # fewer held-out images give the nearest-neighbour distances no usable mean
MASK_PAPER = {
    "vessel": "generated fundus images keep realistic vessels (paper 1: vessel segmentation of generated images)",
    "lungs": "generated chest X-rays keep realistic lung fields (GMIA edits chest X-rays whose anatomy a segmenter "
             "must still find)",
}


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """Per generator: FD below ``Config.fd_ratio`` of the untrained generator's; mask fraction within
    ``Config.mask_tolerance`` of the real one; (fundus) vessel trees like the real ones; labels read off generated
    images within ``Config.label_tolerance`` of those read off real images; projector PSNR (W+) at least
    ``Config.projector_psnr_target``."""
    config = outcome.config
    claims: list[Claim] = []
    for kind in outcome.generators:
        segmenter = outcome.segmenters[KINDS[kind][0]]
        mask = segmenter["mask"]
        unet = [Instrument(f"{mask} U-Net validation Dice", segmenter["val_dice"], config.segmenter_min_dice)]
        n = int(min(config.eval_images, len(outcome.samples[kind]["real"]) and config.eval_images))
        size = {"n": n, "min_n": config.min_eval_images, "kind": "phantom-check"}
        extractor = f"FD-{mask}-unet"
        fd, fd_untrained = outcome.value(kind, extractor), outcome.value(kind, f"{extractor}/untrained")
        claims.append(decide(
            f"{kind}-fd", f"{kind}: {extractor}(generated, real) is less than {config.fd_ratio:.3g} of "
                          f"{extractor}(untrained generator, real)",
            paper="the papers' generators reach FID 5-15 at 256 px (not comparable: other features)",
            ours={"fd": round(fd, 3), "fd_untrained": round(fd_untrained, 3)},
            rule="directional", effect=config.fd_ratio * fd_untrained - fd,
            se=difference_se(config.fd_ratio * outcome.value(kind, f"{extractor}/untrained/se"),
                             outcome.value(kind, f"{extractor}/se")),
            quantity=f"{config.fd_ratio:.3g} x FD(untrained) - FD(generated)", instruments=unet, **size))
        real, fake = outcome.value(kind, f"{mask}_fraction/real"), outcome.value(kind, f"{mask}_fraction/generated")
        native = outcome.value(kind, f"{mask}_fraction/real_native")
        ours = {"real": round(real, 4), "generated": round(fake, 4)}
        note = ""
        if math.isfinite(native):
            ours["real_native"] = round(native, 4)
            side, cohort_side = config.image_size_of(kind), config.cohort_size_of(kind)
            note = (f"at {side} px (upsampled to {cohort_side}) the segmenter finds {real:.4f} {mask} pixels in real "
                    f"images against {native:.4f} at {cohort_side} px")
        claims.append(decide(
            f"{kind}-{mask}-fraction", f"{kind}: the {mask}-pixel fraction of generated images is within "
                                       f"{100 * config.mask_tolerance:.0f} % of the real one",
            paper=MASK_PAPER[mask], ours=ours, rule="equivalence", effect=relative_difference(fake, real),
            se=outcome.value(kind, f"{mask}_fraction/relative_difference/se"), margin=config.mask_tolerance,
            quantity="(generated - real) / real fraction", instruments=unet, note=note, **size))
        if math.isfinite(outcome.value(kind, f"{mask}_skeleton/length_per_piece/real")):
            claims.append(tree_claim(lambda name, kind=kind: outcome.value(kind, name), kind, config, unet, size))
        classifier = outcome.classifiers.get(KINDS[kind][0])
        if classifier is not None:
            claims.append(_label_claim(outcome, kind, classifier, size))
        claims.append(_memorisation_claim(outcome, kind, unet))
        value = outcome.value(kind, "projector_W+/PSNR")
        claims.append(decide(
            f"{kind}-projector", f"{kind}: the projector reaches PSNR >= {config.projector_psnr_target:g} dB (W+) on "
                                 "held-out images",
            paper="paper 1 / GMIA invert real images before editing (no PSNR target published)",
            ours={"psnr_w_plus": round(value, 2), "psnr_w": round(outcome.value(kind, "projector_W/PSNR"), 2),
                  "ssim_w_plus": round(outcome.value(kind, "projector_W+/SSIM"), 3),
                  "lpips_w_plus": round(outcome.value(kind, f"projector_W+/LPIPS-{mask}-unet"), 3)},
            rule="directional", effect=value - config.projector_psnr_target,
            se=outcome.value(kind, "projector_W+/PSNR/se"),
            quantity=f"mean PSNR (W+) - {config.projector_psnr_target:g} dB",
            note=f"{config.projector_images} held-out images", n=config.projector_images,
            min_n=MIN_PROJECTOR_IMAGES, kind="phantom-check"))
    return claims


def _memorisation_claim(outcome: Outcome, kind: str, unet: list[Instrument]) -> Claim:
    """The generator does not copy its training images: the mean distance of its samples to their nearest training
    image is no more than ``Config.memorisation_margin`` (relative) below that of held-out real images (a retention
    claim on ratio - 1, :func:`anonpaper.experiments.generators.pipeline.memorisation_rows`)."""
    config = outcome.config
    ratio = outcome.value(kind, "memorisation/ratio")
    held_out = outcome.value(kind, "memorisation/n/held_out")
    learned = outcome.value(kind, "memorisation/n/train")
    population = learned_population(outcome.generators[kind])
    note = ("a generator far from every real image also passes: read it with the FD and vessel checks"
            + (f"; its nearest training images are sought among the {learned:.0f} images of the phantom population "
               f"the weights learned ({population.n_patients} patients outside the cohort), the held-out images are "
               "the cohort's test images" if population is not None and math.isfinite(learned) else ""))
    return decide(
        f"{kind}-no-memorisation", f"{kind}: generated samples are no closer to their nearest training image than "
                                   f"held-out real images are (within {100 * config.memorisation_margin:.0f} %)",
        paper="the papers release synthetic images as new individuals (k-SALSA, GMIA), which assumes no copies",
        ours={"ratio": round(ratio, 4),
              "nn_generated": round(outcome.value(kind, "memorisation/nn_distance/generated"), 4),
              "nn_held_out": round(outcome.value(kind, "memorisation/nn_distance/held_out"), 4),
              "held_out_images": int(held_out) if math.isfinite(held_out) else 0},
        rule="retention", effect=ratio - 1.0, se=outcome.value(kind, "memorisation/ratio/se"),
        margin=config.memorisation_margin,
        quantity="mean nearest-training distance: generated / held-out - 1 (negative: samples closer)",
        instruments=unet, note=note, n=int(held_out) if math.isfinite(held_out) else 0,
        min_n=MIN_MEMORISATION_IMAGES, kind="phantom-check")


def tree_differences(value: Callable[[str], float], mask: str = "vessel") -> dict[str, tuple[float, float]]:
    """The tree check's statistics as ``{name: ((generated - real) / real, SE)}`` for each of
    :data:`~anonpaper.experiments.generators.pipeline.TREE_STATISTICS`, read with ``value(metric)`` (a metric name
    such as ``"vessel_skeleton/length_per_piece/real"``; NaN when absent).

    >>> point = {"vessel_skeleton/length_per_piece/real": 150.0, "vessel_skeleton/length_per_piece/generated": 45.0,
    ...          "vessel_skeleton/length_per_piece/relative_difference/se": 0.02}
    >>> tree_differences(lambda name: point.get(name, math.nan))["length_per_piece"]
    (-0.7, 0.02)
    """
    return {name: (relative_difference(value(f"{mask}_skeleton/{name}/generated"),
                                       value(f"{mask}_skeleton/{name}/real")),
                   value(f"{mask}_skeleton/{name}/relative_difference/se"))
            for name in TREE_STATISTICS}


def binding_tree_statistic(differences: dict[str, tuple[float, float]], z: float = DECISION_Z) -> str:
    """The statistic the tree check is decided on: the one furthest from the real images, ``|difference| + z SE``
    (a statistic that cannot be measured counts as infinitely far), so the check holds only when every statistic
    does and fails when that one fails."""
    def distance(name: str) -> float:
        effect, se = differences[name]
        return abs(effect) + z * se if math.isfinite(effect) and math.isfinite(se) else math.inf

    return max(differences, key=distance)


def tree_claim(value: Callable[[str], float], kind: str, config: Config, unet: Sequence[Instrument | dict],
               size: dict) -> Claim:
    """Generated vessels are trees, not strokes: skeleton length per connected piece and junctions per image each
    within ``Config.tree_tolerance`` of the real images' (see :func:`anonpaper.experiments.generators.pipeline.
    skeleton_statistics`), decided on :func:`binding_tree_statistic`. Besides the U-Net's Dice, the statistics
    have a floor of their own: saved as JPEG at ``Config.tree_jpeg_quality``, the real images must keep both within
    half the tolerance (an instrument that reads compressed real vessels as strokes cannot judge generated ones).

    Args:
        value: Reads one of ``kind``'s metrics by name (the chapter's metrics table, or a training curve's point).
        kind: Generator kind; its modality names the mask.
        config: The evaluation's settings (tolerance, JPEG quality).
        unet: The segmenter's instruments.
        size: ``n``, ``min_n`` and ``kind`` of :func:`~anonpaper.experiments.claims.decide`.
    """
    mask = FEATURE_MASKS[KINDS[kind][0]]
    names = ("length_per_piece", "junctions_per_image", "pieces_per_image", "largest_piece")
    values = {(name, source): value(f"{mask}_skeleton/{name}/{source}")
              for name in names for source in ("real", "generated")}
    differences = tree_differences(value, mask)
    binding = binding_tree_statistic(differences)
    effect, se = differences[binding]
    # The skeleton statistics' own floor: real images saved as JPEG (vessels intact) must read as the same trees.
    stability = Instrument(f"{mask}-tree statistics' change on real images saved as JPEG at quality "
                           f"{config.tree_jpeg_quality}", value(f"{mask}_skeleton/jpeg_change"),
                           config.tree_tolerance / 2, higher_is_better=False)
    return decide(
        f"{kind}-{mask}-tree", f"{kind}: generated {mask}s are trees like the real ones (skeleton length per "
                               f"connected piece and junctions per image each within "
                               f"{100 * config.tree_tolerance:.0f} % of the real images')",
        paper="generated fundus images show the vessel tree (paper 1 segments and edits it)",
        ours={f"{name}_{source}": round(values[name, source], 3) for name in names for source in ("real", "generated")},
        rule="equivalence", effect=effect, se=se, margin=config.tree_tolerance,
        quantity=f"(generated - real) / real {binding.replace('_', ' ')}", instruments=[*unet, stability],
        note="; ".join(f"{name.replace('_', ' ')} {100 * value[0]:+.1f} %" for name, value in differences.items()
                       if math.isfinite(value[0])) or "the real images' masks have no skeleton or no junctions",
        **size)


def _label_claim(outcome: Outcome, kind: str, classifier, size: dict) -> Claim:
    """Generated images carry the cohort's labels as often as real ones: the label distance (DR grades: total
    variation; findings: mean absolute prevalence difference) between what the cohort's classifier reads off
    generated and real images is at most ``Config.label_tolerance`` (an equivalence claim on the distance);
    undecided when the classifier misses its held-out floor, or reads its held-out real images saved as JPEG at
    ``Config.label_jpeg_quality`` as labels more than half the tolerance away."""
    config = outcome.config
    grade = classifier.task == "grade"
    what = "DR grades" if grade else "findings"
    distance = outcome.value(kind, "labels/distance")
    ours = {"distance": round(distance, 3), "distance_held_out": round(outcome.value(kind, "labels/distance/held_out"),
                                                                       3)}
    ours.update({f"{name}_{source}": round(outcome.value(kind, f"labels/{name}/{source}"), 3)
                 for name in classifier.names for source in ("real", "generated")})
    floor = config.classifier_min_qwk if grade else config.classifier_min_auroc
    measure = "held-out QWK" if grade else "held-out macro AUROC"
    note = _label_note(outcome, kind, ours)  # adds the reference's own distance to ours
    return decide(
        f"{kind}-labels", f"{kind}: the {what} the cohort's classifier reads off generated images lie within "
                          f"{config.label_tolerance:g} of those it reads off real images "
                          f"({classifier.distance_name})",
        paper="generated images keep the disease labels (k-SALSA and GMIA train classifiers on synthetic images)",
        ours=ours, rule="equivalence", effect=distance, se=outcome.value(kind, "labels/distance/se"),
        margin=config.label_tolerance, quantity=f"{classifier.distance_name} (generated vs real)",
        instruments=[Instrument(f"{classifier.instrument} {measure}", outcome.value(kind, "labels/check"), floor),
                     # Its own floor, as the tree check's: real images saved as JPEG must read as the same labels.
                     Instrument(f"{classifier.instrument}: {classifier.distance_name} of its held-out real images' "
                                f"labels when saved as JPEG at quality {config.label_jpeg_quality}",
                                outcome.value(kind, "labels/jpeg_change"), config.label_tolerance / 2,
                                higher_is_better=False)],
        note=note, **size)


def _label_note(outcome: Outcome, kind: str, ours: dict) -> str:
    """What the label claim's reader should weigh beside its verdict: how far two real samples lie apart, and how far
    the real images' true labels lie from those of the images the generator learned."""
    note = f"two real samples lie {ours['distance_held_out']:.3f} apart"
    reference = outcome.value(kind, "labels/distance/reference")
    if math.isfinite(reference):
        ours["distance_reference_true"] = round(reference, 3)
        note += (f"; the real images' true labels lie {reference:.3f} from those of the "
                 f"{outcome.value(kind, 'memorisation/n/train'):.0f} images the generator learned")
    return note
