"""Preprocessing: fundus field of view on a real photograph (skimage.data.retina), CXR borders, iris crop."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import skimage.data

from anonpaper.data.preprocessing import (CropBox, crop_box_resize, crop_cxr, crop_fundus, crop_iris,
                                          cxr_content_box, detect_fundus_fov, detect_pupil, fundus_fov_mask)


@pytest.fixture(scope="module")
def retina_small():
    """skimage's real fundus photograph (1411x1411), shrunk to 353x353 to keep the tests fast."""
    image = skimage.data.retina()
    return cv2.resize(image, (353, 353), interpolation=cv2.INTER_AREA)


@pytest.fixture(scope="module")
def retina_fov(retina_small):
    return detect_fundus_fov(retina_small)


@pytest.mark.unit
def test_fov_on_real_photograph_is_a_large_centred_circle(retina_small, retina_fov):
    # The disc of skimage's retina nearly fills the square frame: centre near the middle, radius ~ half the side.
    side = retina_small.shape[0]
    assert abs(retina_fov.center_row - side / 2) < 0.03 * side
    assert abs(retina_fov.center_col - side / 2) < 0.03 * side
    assert 0.45 * side < retina_fov.radius < 0.52 * side
    # The mask area agrees with the fitted circle (pi r^2) within 5%.
    assert abs(retina_fov.mask.sum() / (np.pi * retina_fov.radius ** 2) - 1) < 0.05


@pytest.mark.unit
@pytest.mark.parametrize("scale, pad, shift, permutation, gains", [
    (0.6, (40, 90), (25, 60), (1, 2, 0), (1.2, 0.7, 0.9)),
    (1.3, (10, 10), (0, 140), (2, 1, 0), (0.8, 1.0, 0.6)),
    (0.45, (120, 30), (70, 5), (0, 1, 2), (1.0, 1.0, 1.0)),
])
def test_fov_follows_padding_shift_rescale_and_recolouring(retina_small, retina_fov, scale, pad, shift,
                                                           permutation, gains):
    """Transform the real photograph; the detected circle must move and scale exactly as the transform says."""
    resized = cv2.resize(retina_small, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    height, width = resized.shape[:2]
    canvas = np.zeros((height + 2 * pad[0] + shift[0], width + 2 * pad[1] + shift[1], 3), dtype=np.uint8)
    canvas[:] = (4, 2, 6)  # not pure black: scanners leave a dark, slightly coloured background
    top, left = pad[0] + shift[0], pad[1] + shift[1]
    canvas[top:top + height, left:left + width] = resized
    recoloured = np.clip(canvas[..., list(permutation)] * np.array(gains), 0, 255).astype(np.uint8)
    fov = detect_fundus_fov(recoloured)
    # pixel-centre convention of cv2.resize: x' = (x + 0.5) * s - 0.5
    expected_row = (retina_fov.center_row + 0.5) * scale - 0.5 + top
    expected_col = (retina_fov.center_col + 0.5) * scale - 0.5 + left
    tolerance = 0.02 * retina_fov.radius * scale + 1.5
    assert abs(fov.center_row - expected_row) < tolerance
    assert abs(fov.center_col - expected_col) < tolerance
    assert abs(fov.radius - retina_fov.radius * scale) < tolerance
    # The crop of the transformed image matches the crop of the original (same content, black borders removed).
    reference = crop_fundus(retina_small, 96).astype(float)
    cropped = crop_fundus(recoloured, 96)
    assert cropped.shape == (96, 96, 3) and cropped.dtype == np.uint8
    undone = cropped[..., np.argsort(permutation)].astype(float) / np.array(gains)[np.argsort(permutation)]
    inside = np.hypot(*np.mgrid[-47.5:48.5, -47.5:48.5]) < 40  # clipped channels live only near saturation
    assert np.abs(undone - reference)[inside].mean() < 6.0


@pytest.mark.unit
def test_fov_of_a_disc_truncated_top_and_bottom(retina_small, retina_fov):
    """Many cameras cut the disc at the top and bottom; the fit uses left/right edges and still finds the circle."""
    cut = 60
    truncated = retina_small[cut:-cut]
    fov = detect_fundus_fov(truncated)
    assert abs(fov.center_row + cut - retina_fov.center_row) < 3
    assert abs(fov.center_col - retina_fov.center_col) < 3
    assert abs(fov.radius - retina_fov.radius) < 3
    cropped = crop_fundus(truncated, 64)
    # The crop is square on the full circle, so the cut-off parts come back as black bands at top and bottom.
    assert cropped.shape == (64, 64, 3)
    assert cropped[0].max() < 20 and cropped[-1].max() < 20 and cropped[32, 32].max() > 60


@pytest.mark.unit
def test_crop_fundus_moves_masks_with_the_image(retina_small):
    mask = np.zeros(retina_small.shape[:2], dtype=bool)
    mask[150:170, 200:230] = True
    cropped, masks = crop_fundus(retina_small, 128, masks={"lesion": mask})
    assert masks["lesion"].dtype == bool and masks["lesion"].shape == (128, 128)
    # The mask's centroid maps through the same affine transform as the image.
    fov = detect_fundus_fov(retina_small)
    box = fov.box()
    scale = 128 / box.height
    rows, cols = np.nonzero(masks["lesion"])
    assert abs(rows.mean() - ((159.5 - box.top) * scale)) < 1.5
    assert abs(cols.mean() - ((214.5 - box.left) * scale)) < 1.5
    assert crop_fundus(retina_small, 128, mask_outside=True)[0, 0].max() == 0
    with pytest.raises(ValueError, match="mask 'bad' has shape"):
        crop_fundus(retina_small, 64, masks={"bad": np.zeros((10, 10), dtype=bool)})


@pytest.mark.unit
def test_fundus_input_validation_and_no_mutation(retina_small):
    original = retina_small.copy()
    detect_fundus_fov(retina_small)
    crop_fundus(retina_small, 32)
    assert np.array_equal(original, retina_small)
    with pytest.raises(ValueError, match="uint8"):
        fundus_fov_mask(retina_small.astype(np.float32))
    with pytest.raises(ValueError, match="channel"):
        fundus_fov_mask(np.zeros((32, 32, 4), dtype=np.uint8))
    with pytest.raises(ValueError, match="no pixel brighter"):
        fundus_fov_mask(np.zeros((64, 64, 3), dtype=np.uint8))


@pytest.mark.unit
def test_crop_box_resize_pads_outside_and_keeps_dtype():
    image = np.arange(16, dtype=np.uint8).reshape(4, 4)
    out = crop_box_resize(image, CropBox(-1, -1, 3, 3))
    assert np.array_equal(out, [[0, 0, 0], [0, 0, 1], [0, 4, 5]])
    mask = crop_box_resize(np.ones((4, 4), dtype=bool), CropBox(2, 2, 4, 4), 8)
    assert mask.dtype == bool and mask.shape == (8, 8) and mask[:4, :4].all() and not mask[4:, 4:].any()


@pytest.mark.unit
def test_cxr_border_crop_recovers_the_content_box():
    rng = np.random.default_rng(0)
    content = np.clip(rng.normal(120, 30, size=(180, 140)), 1, 254).astype(np.uint8)
    padded = np.zeros((230, 200), dtype=np.uint8)
    padded[:, 150:] = 255  # a white band on the right (collimator / export padding)
    padded[20:200, 10:150] = content
    box = cxr_content_box(padded)
    assert (box.top, box.left, box.height, box.width) == (20, 10, 180, 140)
    square = crop_cxr(padded, 64)
    assert square.shape == (64, 64) and square.dtype == np.uint8
    # "crop" keeps the central 140x140 of the content; compare to resizing that region directly.
    expected = cv2.resize(content[20:160], (64, 64), interpolation=cv2.INTER_AREA)
    assert np.abs(square.astype(int) - expected).max() <= 1
    padded_mode = crop_cxr(padded, 90, mode="pad")
    assert padded_mode.shape == (90, 90) and padded_mode[:, :5].max() == 0  # black side bands from padding
    rgb = np.repeat(padded[..., None], 3, axis=2)
    assert np.array_equal(crop_cxr(rgb, 64), square)
    with pytest.raises(ValueError, match="entirely uniform"):
        cxr_content_box(np.zeros((50, 50), dtype=np.uint8))


@pytest.mark.unit
def test_iris_crop_centres_on_the_pupil():
    rows, cols = np.mgrid[:240, :320]
    center = (130.0, 175.0)
    distance = np.hypot(rows - center[0], cols - center[1])
    image = np.full((240, 320), 170, dtype=np.uint8)
    image[distance < 80] = 110
    image[distance < 28] = 12
    row, col, radius = detect_pupil(image)
    assert abs(row - center[0]) < 1 and abs(col - center[1]) < 1 and abs(radius - 28) < 2
    crop = crop_iris(image, 64)
    assert crop.shape == (64, 64) and crop.dtype == np.uint8
    # The pupil sits in the middle of the crop, and the contrast stretch reaches both ends of the range.
    assert crop[30:34, 30:34].max() < 40 and crop.max() > 200


@pytest.mark.unit
def test_fov_of_a_disc_cut_at_the_sides_and_of_a_borderless_image(retina_small, retina_fov):
    cut = 40
    sides_cut = retina_small[:, cut:-cut]
    fov = detect_fundus_fov(sides_cut)
    assert abs(fov.center_col + cut - retina_fov.center_col) < 3
    assert abs(fov.center_row - retina_fov.center_row) < 3 and abs(fov.radius - retina_fov.radius) < 3
    with pytest.raises(ValueError, match="fills the"):
        detect_fundus_fov(retina_small[100:250, 100:250])  # inside the disc: no border anywhere


@pytest.mark.unit
def test_fov_detected_on_a_shrunk_copy_maps_back_to_full_resolution(retina_small, retina_fov):
    fast = detect_fundus_fov(retina_small, work_size=128)  # 353 px image detected at 128 px
    assert abs(fast.center_row - retina_fov.center_row) < 1.5
    assert abs(fast.center_col - retina_fov.center_col) < 1.5
    assert abs(fast.radius - retina_fov.radius) < 2.0
    assert fast.mask.shape == retina_small.shape[:2]
    # Masks differ only on the rim: one shrunk pixel covers ~2.8 full pixels, a ring of ~1.5% of the frame.
    assert (fast.mask != retina_fov.mask).mean() < 0.03
