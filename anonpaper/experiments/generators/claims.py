"""The generators chapter's checks, each decided from the run's numbers (see :mod:`anonpaper.experiments.claims`).

They are ``phantom-check`` claims: they test whether our generators are good enough for the GAN chapters, not a
paper's result. Distribution claims are undecided below ``Config.min_eval_images`` images per set; the
vessel-fraction and vessel-tree claims are undecided when the vessel segmenter failed its own Dice check.
"""

from __future__ import annotations

import math

from anonpaper.experiments.claims import Claim, decide, instrument_failed
from anonpaper.experiments.generators.config import KINDS
from anonpaper.experiments.generators.pipeline import Outcome

FD_RATIO = 1 / 3
VESSEL_TOLERANCE = 0.25
TREE_TOLERANCE = 0.5  # skeleton numbers of a few dozen pixels per 64 px image: looser than the pixel count
MIN_PROJECTOR_IMAGES = 5  # fewer held-out inversions decide nothing


def evaluate_claims(outcome: Outcome) -> list[Claim]:
    """Per generator: FD below a third of the untrained generator's; mask fraction within 25 % of the real one;
    (fundus) vessel trees like the real ones; labels read off generated images within ``Config.label_tolerance`` of
    those read off real images; projector PSNR (W+) at least ``Config.projector_psnr_target``."""
    config = outcome.config
    claims: list[Claim] = []
    for kind in outcome.generators:
        mask = outcome.segmenters[KINDS[kind][0]]["mask"]
        n = int(min(config.eval_images, len(outcome.samples[kind]["real"]) and config.eval_images))
        size = {"n": n, "min_n": config.min_eval_images, "kind": "phantom-check"}
        extractor = f"FD-{mask}-unet"
        fd, fd_untrained = outcome.value(kind, extractor), outcome.value(kind, f"{extractor}/untrained")
        claims.append(decide(
            f"{kind}-fd", f"{kind}: {extractor}(generated, real) is less than a third of {extractor}(untrained "
                          "generator, real)",
            paper="the papers' generators reach FID 5-15 at 256 px (not comparable: other features)",
            ours={"fd": round(fd, 3), "fd_untrained": round(fd_untrained, 3)},
            holds=bool(fd < FD_RATIO * fd_untrained) if math.isfinite(fd) and math.isfinite(fd_untrained) else None,
            reason=f"ratio {fd / fd_untrained:.3f} (threshold {FD_RATIO:.3f})" if fd_untrained else "no FD", **size))
        real, fake = outcome.value(kind, f"{mask}_fraction/real"), outcome.value(kind, f"{mask}_fraction/generated")
        relative = abs(fake - real) / real if real > 0 else float("nan")
        native = outcome.value(kind, f"{mask}_fraction/real_native")
        ours = {"real": round(real, 4), "generated": round(fake, 4)}
        note = ""
        if math.isfinite(native):
            ours["real_native"] = round(native, 4)
            side, cohort_side = config.image_size_of(kind), config.cohort_size_of(kind)
            note = (f"; at {side} px (upsampled to {cohort_side}) the segmenter finds {real:.4f} {mask} pixels in "
                    f"real images against {native:.4f} at {cohort_side} px")
        claim = decide(
            f"{kind}-{mask}-fraction", f"{kind}: the {mask}-pixel fraction of generated images is within "
                                       f"{100 * VESSEL_TOLERANCE:.0f} % of the real one",
            paper="generated fundus images keep realistic vessels (paper 1: vessel segmentation of generated images)",
            ours=ours, holds=bool(relative <= VESSEL_TOLERANCE) if math.isfinite(relative) else None,
            reason=(f"relative difference {100 * relative:.1f} %" if math.isfinite(relative)
                    else "no real mask pixels") + note, **size)
        check = outcome.segmenters[KINDS[kind][0]]["check"]
        claims.append(instrument_failed(claim, f"{mask} segmenter", check) if check else claim)
        if math.isfinite(outcome.value(kind, f"{mask}_skeleton/length_per_piece/real")):
            claim = _tree_claim(outcome, kind, mask, size)
            claims.append(instrument_failed(claim, f"{mask} segmenter", check) if check else claim)
        classifier = outcome.classifiers.get(KINDS[kind][0])
        if classifier is not None:
            claims.append(_label_claim(outcome, kind, classifier, size))
        value = outcome.value(kind, "projector_W+/PSNR")
        claims.append(decide(
            f"{kind}-projector", f"{kind}: the projector reaches PSNR >= {config.projector_psnr_target:g} dB (W+) on "
                                 "held-out images",
            paper="paper 1 / GMIA invert real images before editing (no PSNR target published)",
            ours={"psnr_w_plus": round(value, 2), "psnr_w": round(outcome.value(kind, "projector_W/PSNR"), 2),
                  "ssim_w_plus": round(outcome.value(kind, "projector_W+/SSIM"), 3),
                  "lpips_w_plus": round(outcome.value(kind, f"projector_W+/LPIPS-{mask}-unet"), 3)},
            holds=bool(value >= config.projector_psnr_target) if math.isfinite(value) else None,
            reason=f"mean PSNR over {config.projector_images} held-out images" if math.isfinite(value)
            else "no held-out images", n=config.projector_images, min_n=MIN_PROJECTOR_IMAGES, kind="phantom-check"))
    return claims


def _tree_claim(outcome: Outcome, kind: str, mask: str, size: dict) -> Claim:
    """Generated vessels are trees, not strokes: skeleton length per connected piece and junctions per image each
    within ``TREE_TOLERANCE`` of the real images' (see :func:`anonpaper.experiments.generators.pipeline.
    skeleton_statistics`)."""
    names = ("length_per_piece", "junctions_per_image", "pieces_per_image", "largest_piece")
    values = {(name, source): outcome.value(kind, f"{mask}_skeleton/{name}/{source}")
              for name in names for source in ("real", "generated")}
    relative = {name: abs(values[name, "generated"] - values[name, "real"]) / values[name, "real"]
                if values[name, "real"] > 0 else float("nan") for name in names[:2]}
    decidable = all(math.isfinite(value) for value in relative.values())
    return decide(
        f"{kind}-{mask}-tree", f"{kind}: generated {mask}s are trees like the real ones (skeleton length per "
                               f"connected piece and junctions per image each within {100 * TREE_TOLERANCE:.0f} % "
                               "of the real images')",
        paper="generated fundus images show the vessel tree (paper 1 segments and edits it)",
        ours={f"{name}_{source}": round(values[name, source], 3) for name in names for source in ("real", "generated")},
        holds=bool(max(relative.values()) <= TREE_TOLERANCE) if decidable else None,
        reason=(f"relative differences: length per piece {100 * relative['length_per_piece']:.1f} %, junctions "
                f"per image {100 * relative['junctions_per_image']:.1f} %" if decidable
                else "the real images' masks have no skeleton or no junctions"), **size)


def _label_claim(outcome: Outcome, kind: str, classifier, size: dict) -> Claim:
    """Generated images carry the cohort's labels as often as real ones: the label distance (DR grades: total
    variation; findings: mean absolute prevalence difference) between what the cohort's classifier reads off
    generated and real images is at most ``Config.label_tolerance``; undecided when the classifier fails its
    held-out check."""
    config = outcome.config
    grade = classifier.task == "grade"
    what = "DR grades" if grade else "findings"
    distance = outcome.value(kind, "labels/distance")
    ours = {"distance": round(distance, 3), "distance_held_out": round(outcome.value(kind, "labels/distance/held_out"),
                                                                       3)}
    ours.update({f"{name}_{source}": round(outcome.value(kind, f"labels/{name}/{source}"), 3)
                 for name in classifier.names for source in ("real", "generated")})
    claim = decide(
        f"{kind}-labels", f"{kind}: the {what} the cohort's classifier reads off generated images lie within "
                          f"{config.label_tolerance:g} of those it reads off real images "
                          f"({classifier.distance_name})",
        paper="generated images keep the disease labels (k-SALSA and GMIA train classifiers on synthetic images)",
        ours=ours, holds=bool(distance <= config.label_tolerance) if math.isfinite(distance) else None,
        reason=f"distance {distance:.3f} (two real samples: {ours['distance_held_out']:.3f})"
        if math.isfinite(distance) else "no label distance", **size)
    check = outcome.value(kind, "labels/check")
    floor = config.classifier_min_qwk if grade else config.classifier_min_auroc
    if not (math.isfinite(check) and check >= floor):
        measure = "held-out QWK" if grade else "held-out macro AUROC"
        return instrument_failed(claim, classifier.instrument, f"{measure} {check:.3f} < {floor:g}")
    return claim
