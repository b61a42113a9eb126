"""Preprocessing shared by phantoms and real datasets: fundus field of view, chest X-ray borders, iris crop.

Every function takes a uint8 image, never modifies it, and returns a new array. Geometry is computed once
(:func:`detect_fundus_fov`, :func:`cxr_content_box`, :func:`detect_pupil`) and applied by :func:`crop_box_resize`,
so masks of the same image get exactly the same crop (resized with nearest neighbour).

Fundus recipe (paper 1, Zhao et al. 2023, Sec. 4.2.1): detect the edge of the fundus, centre-crop on the centre of
that edge, remove the black areas that hold no information, resize. Here the edge is the boundary of the
field-of-view mask; a circle is fitted by least squares to its left/right boundary points (which stay on the circle
even when the camera cut the disc off at the top and bottom), and the crop is the square bounding that circle,
padded with black where the circle leaves the image.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from scipy import ndimage


def _check_uint8_image(image: np.ndarray, name: str = "image", channels: tuple[int, ...] = (1, 3)) -> None:
    if not isinstance(image, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(image).__name__}")
    if image.dtype != np.uint8:
        raise ValueError(f"{name} must be uint8, got dtype {image.dtype}")
    if image.ndim == 2:
        if 1 not in channels:
            raise ValueError(f"{name} must have {channels} channel(s), got a 2-D grayscale array {image.shape}")
    elif image.ndim == 3:
        if image.shape[2] not in channels:
            raise ValueError(f"{name} must be (H, W) or (H, W, C) with channel count C in {channels}, "
                             f"got shape {image.shape}")
    else:
        raise ValueError(f"{name} must be (H, W) or (H, W, C), got shape {image.shape}")
    if min(image.shape[:2]) < 8:
        raise ValueError(f"{name} is too small to preprocess: shape {image.shape}, need at least 8x8")


@dataclass(frozen=True)
class CropBox:
    """A crop window in pixel coordinates; may extend past the image (the outside is padded).

    Attributes:
        top, left: Upper-left corner (rows, columns), may be negative.
        height, width: Window size in pixels, positive.
    """

    top: int
    left: int
    height: int
    width: int


@dataclass(frozen=True)
class FieldOfView:
    """The fundus field of view: a circle (centre, radius in pixels) and the binary mask it came from.

    Attributes:
        center_row, center_col: Circle centre (float pixels; may lie outside the image).
        radius: Circle radius (float pixels).
        mask: bool (H, W), True inside the detected field of view (thresholded, largest component, holes filled).
    """

    center_row: float
    center_col: float
    radius: float
    mask: np.ndarray

    def box(self) -> CropBox:
        """The square bounding the circle: the paper's centre crop with the black areas removed."""
        side = int(round(2 * self.radius))
        top = int(round(self.center_row - self.radius))
        left = int(round(self.center_col - self.radius))
        return CropBox(top, left, side, side)


def crop_box_resize(array: np.ndarray, box: CropBox, size: int | tuple[int, int] | None = None,
                    interpolation: str = "area", fill: int | float = 0) -> np.ndarray:
    """Cut ``box`` out of ``array`` (padding with ``fill`` outside it) and resize to ``size``.

    Args:
        array: (H, W) or (H, W, C) image or mask (any dtype; bool masks stay bool).
        box: The window; parts outside the image are filled with ``fill``.
        size: Output side (int, square) or (height, width); None keeps the box size.
        interpolation: "area" (images, shrinking), "linear" or "nearest" (masks, labels).

    Returns:
        A new array of shape (size, size[, C]) and the input's dtype.
    """
    if box.height <= 0 or box.width <= 0:
        raise ValueError(f"crop box must have positive size, got {box}")
    modes = {"area": cv2.INTER_AREA, "linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST}
    if interpolation not in modes:
        raise ValueError(f"interpolation must be one of {sorted(modes)}, got {interpolation!r}")
    is_bool = array.dtype == bool
    source = array.astype(np.uint8) if is_bool else array
    height, width = source.shape[:2]
    out = np.full((box.height, box.width) + source.shape[2:], fill, dtype=source.dtype)
    top, left = max(box.top, 0), max(box.left, 0)
    bottom, right = min(box.top + box.height, height), min(box.left + box.width, width)
    if bottom > top and right > left:
        out[top - box.top:bottom - box.top, left - box.left:right - box.left] = source[top:bottom, left:right]
    if size is not None:
        target = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
        if min(target) <= 0:
            raise ValueError(f"size must be positive, got {size}")
        mode = "nearest" if is_bool else interpolation
        if mode == "area" and (target[0] > box.height or target[1] > box.width):
            mode = "linear"  # INTER_AREA is meant for shrinking; enlarge with bilinear
        squeeze = out.ndim == 3 and out.shape[2] == 1
        out = cv2.resize(out, (target[1], target[0]), interpolation=modes[mode])
        if squeeze:
            out = out[..., None]
    return out.astype(bool) if is_bool else out


# -- fundus ------------------------------------------------------------------------------------------------------
def fundus_fov_mask(image: np.ndarray, threshold: float | None = None) -> np.ndarray:
    """Binary field-of-view mask of a fundus photograph.

    The brightest channel is used (robust to recolouring: the fundus is bright in at least one channel), blurred,
    and thresholded between the background level (1st percentile) and the Otsu level; the largest connected
    component is kept and its holes filled.

    Args:
        image: uint8 (H, W, 3) RGB or (H, W) grayscale.
        threshold: Absolute threshold on 0..255; None picks it from the image as described.

    Returns:
        bool (H, W), True inside the field of view.

    Raises:
        ValueError: On a bad image or when nothing stands out from the background (no field of view).
    """
    _check_uint8_image(image, "fundus image")
    brightness = image.max(axis=2) if image.ndim == 3 else image
    brightness = cv2.GaussianBlur(brightness, (0, 0), sigmaX=max(1.0, min(brightness.shape) / 300))
    if threshold is None:
        background = float(np.percentile(brightness, 1))
        from skimage.filters import threshold_otsu

        otsu = float(threshold_otsu(brightness))
        # A third of the way from background to Otsu: keeps the darker rim of the disc, excludes black padding.
        threshold = background + max(4.0, (otsu - background) / 3)
    mask = brightness > threshold
    labels, count = ndimage.label(mask)
    if count == 0:
        raise ValueError(f"no field of view found: no pixel brighter than {threshold:.1f} in the fundus image")
    sizes = np.bincount(labels.ravel())[1:]
    mask = labels == (1 + int(np.argmax(sizes)))
    return ndimage.binary_fill_holes(mask)


def detect_fundus_fov(image: np.ndarray, threshold: float | None = None, work_size: int | None = 512) -> FieldOfView:
    """Find the circular field of view of a fundus photograph.

    A circle is fitted (algebraic least squares) to the leftmost and rightmost mask pixel of every row, leaving
    out points on the image border (where the image, not the disc, ends). Those points stay on the circle even when
    the camera truncated the disc at the top and bottom. If the disc spans the whole width, the top and bottom
    pixels of every column are used instead.

    Args:
        image: uint8 (H, W, 3) or (H, W).
        threshold: See :func:`fundus_fov_mask`.
        work_size: Detect on a copy shrunk so its longer side is at most this (area interpolation), then map the
            circle back: about 10x faster on 2000-4000 px photographs, at a cost well under a pixel of the
            shrunk copy. None works at full resolution.

    Returns:
        The :class:`FieldOfView` (centre and radius in pixels of ``image``).

    Raises:
        ValueError: When the mask is too small or its boundary cannot be fitted by a circle.
    """
    _check_uint8_image(image, "fundus image")
    if work_size is not None and max(image.shape[:2]) > work_size:
        scale = work_size / max(image.shape[:2])
        shrunk = cv2.resize(image, (max(8, round(image.shape[1] * scale)), max(8, round(image.shape[0] * scale))),
                            interpolation=cv2.INTER_AREA)
        small = detect_fundus_fov(shrunk, threshold, work_size=None)
        scale_row, scale_col = image.shape[0] / shrunk.shape[0], image.shape[1] / shrunk.shape[1]
        mask = cv2.resize(small.mask.astype(np.uint8), (image.shape[1], image.shape[0]),
                          interpolation=cv2.INTER_NEAREST).astype(bool)
        # pixel-centre convention of cv2.resize: x_full = (x_small + 0.5) * scale - 0.5
        return FieldOfView((small.center_row + 0.5) * scale_row - 0.5, (small.center_col + 0.5) * scale_col - 0.5,
                           small.radius * (scale_row + scale_col) / 2, mask)
    mask = fundus_fov_mask(image, threshold)
    height, width = mask.shape
    rows = np.flatnonzero(mask.any(axis=1))
    if len(rows) < 8 or mask.sum() < 64:
        raise ValueError(f"field of view too small ({int(mask.sum())} pixels) in a {height}x{width} image")
    lefts = mask[rows].argmax(axis=1)
    rights = width - 1 - mask[rows, ::-1].argmax(axis=1)
    points_row = np.concatenate([rows, rows]).astype(float)
    points_col = np.concatenate([lefts - 0.5, rights + 0.5]).astype(float)
    inside = (points_col > 0) & (points_col < width - 1)
    points_row, points_col = points_row[inside], points_col[inside]
    if len(points_row) < 8:
        # The disc spans the full width (a tight crop): fit the top and bottom edges of each column instead.
        cols = np.flatnonzero(mask.any(axis=0))
        tops = mask[:, cols].argmax(axis=0)
        bottoms = height - 1 - mask[::-1, cols].argmax(axis=0)
        points_col = np.concatenate([cols, cols]).astype(float)
        points_row = np.concatenate([tops - 0.5, bottoms + 0.5]).astype(float)
        inside = (points_row > 0) & (points_row < height - 1)
        points_row, points_col = points_row[inside], points_col[inside]
    if len(points_row) < 8:
        raise ValueError(f"field of view fills the {height}x{width} image (no dark border on any side); cannot fit "
                         f"its circle: the image is probably already cropped, use it as is")
    # Kasa fit: x^2 + y^2 + D x + E y + F = 0 in the least-squares sense.
    design = np.stack([points_col, points_row, np.ones_like(points_col)], axis=1)
    target = -(points_col ** 2 + points_row ** 2)
    (d, e, f), *_ = np.linalg.lstsq(design, target, rcond=None)
    center_col, center_row = -d / 2, -e / 2
    radius_sq = center_col ** 2 + center_row ** 2 - f
    if not np.isfinite(radius_sq) or radius_sq <= 0:
        raise ValueError("field-of-view boundary is not circular (circle fit failed)")
    return FieldOfView(float(center_row), float(center_col), float(np.sqrt(radius_sq)), mask)


def crop_fundus(image: np.ndarray, size: int | None = 256, masks: dict[str, np.ndarray] | None = None,
                mask_outside: bool = False, fov: FieldOfView | None = None):
    """Paper 1's recipe: centre-crop on the detected field-of-view circle, drop black borders, resize.

    Args:
        image: uint8 (H, W, 3) or (H, W) fundus photograph (not modified).
        size: Output side in pixels; None keeps the crop's native size.
        masks: Optional bool (H, W) masks cropped with the same geometry (nearest-neighbour resize).
        mask_outside: Also set pixels outside the fitted circle to black.
        fov: A precomputed field of view (else detected).

    Returns:
        ``cropped_image`` (uint8, (size, size[, 3])) when ``masks`` is None, else ``(cropped_image, cropped_masks)``.
    """
    fov = detect_fundus_fov(image) if fov is None else fov
    box = fov.box()
    out = crop_box_resize(image, box, size, "area")
    cropped_masks = None
    if masks is not None:
        cropped_masks = {}
        for name, mask in masks.items():
            if mask.shape[:2] != image.shape[:2]:
                raise ValueError(f"mask {name!r} has shape {mask.shape[:2]}, image has {image.shape[:2]}")
            cropped_masks[name] = crop_box_resize(np.asarray(mask).astype(bool), box, size, "nearest")
    if mask_outside:
        side = out.shape[0]
        coords = (np.arange(side) + 0.5) / side * 2 - 1
        disc = coords[:, None] ** 2 + coords[None, :] ** 2 <= 1.0
        out = out.copy()
        out[~disc] = 0
    return out if masks is None else (out, cropped_masks)


# -- chest X-ray -------------------------------------------------------------------------------------------------
def cxr_content_box(image: np.ndarray, flat_std: float = 2.0, extreme_margin: int = 10) -> CropBox:
    """Bounding box of a chest radiograph's content, dropping uniform black or white border rows/columns.

    A border row/column (within what is left) is removed while it is nearly constant (standard deviation < ``flat_std``) and nearly
    black or white (mean within ``extreme_margin`` of 0 or 255): the padding and collimator edges scanners add.

    Args:
        image: uint8 (H, W) grayscale (or (H, W, 3), converted by channel mean).

    Returns:
        The content :class:`CropBox` (the whole image when there is no border).
    """
    _check_uint8_image(image, "chest X-ray")
    gray = image.mean(axis=2) if image.ndim == 3 else image.astype(float)

    def is_border(line: np.ndarray) -> bool:
        mean = float(line.mean())
        return float(line.std()) < flat_std and (mean <= extreme_margin or mean >= 255 - extreme_margin)

    # Peel one uniform line at a time from whichever side has one, judging each line only inside the box left so
    # far: a black band at the top and a white band at the right are both removed even though the top rows
    # contain both colours.
    top, bottom, left, right = 0, gray.shape[0], 0, gray.shape[1]
    changed = True
    while changed and bottom > top and right > left:
        changed = False
        if bottom > top and is_border(gray[top, left:right]):
            top, changed = top + 1, True
        if bottom > top and is_border(gray[bottom - 1, left:right]):
            bottom, changed = bottom - 1, True
        if right > left and bottom > top and is_border(gray[top:bottom, left]):
            left, changed = left + 1, True
        if right > left and bottom > top and is_border(gray[top:bottom, right - 1]):
            right, changed = right - 1, True
    if bottom <= top or right <= left:
        raise ValueError(f"chest X-ray of shape {image.shape} is entirely uniform border; nothing to crop")
    return CropBox(int(top), int(left), int(bottom - top), int(right - left))


def crop_cxr(image: np.ndarray, size: int | None = 256, mode: str = "crop") -> np.ndarray:
    """Remove uniform borders, make square, resize.

    Args:
        image: uint8 (H, W) (or RGB with equal channels; converted to gray).
        size: Output side; None keeps the square's native size.
        mode: "crop" takes the centred square on the shorter side (loses the ends of the longer side);
            "pad" pads the shorter side with black (keeps everything).

    Returns:
        uint8 (size, size).
    """
    _check_uint8_image(image, "chest X-ray")
    gray = image if image.ndim == 2 else np.round(image.mean(axis=2)).astype(np.uint8)
    box = cxr_content_box(gray)
    if mode not in ("crop", "pad"):
        raise ValueError(f"mode must be 'crop' or 'pad', got {mode!r}")
    side = min(box.height, box.width) if mode == "crop" else max(box.height, box.width)
    square = CropBox(box.top + (box.height - side) // 2, box.left + (box.width - side) // 2, side, side)
    return crop_box_resize(gray, square, size, "area")


# -- iris --------------------------------------------------------------------------------------------------------
def detect_pupil(image: np.ndarray, dark_fraction: float = 0.03) -> tuple[float, float, float]:
    """Centre and radius of the pupil: the largest dark blob (darkest ``dark_fraction`` of pixels, smoothed).

    Args:
        image: uint8 (H, W) near-infrared iris image (RGB converted by channel mean).
        dark_fraction: Fraction of darkest pixels taken as pupil candidates (the pupil covers ~1-10% of a frame).

    Returns:
        (center_row, center_col, radius) in pixels; radius from the blob area, sqrt(area / pi).
    """
    _check_uint8_image(image, "iris image")
    gray = image if image.ndim == 2 else np.round(image.mean(axis=2)).astype(np.uint8)
    smooth = cv2.GaussianBlur(gray, (0, 0), sigmaX=max(1.0, min(gray.shape) / 200))
    level = np.quantile(smooth, dark_fraction)
    mask = smooth <= level
    # Opening removes eyelashes and thin dark lines that touch the pupil.
    mask = ndimage.binary_opening(mask, iterations=max(1, min(gray.shape) // 150))
    labels, count = ndimage.label(mask)
    if count == 0:
        raise ValueError("no dark pupil region found in the iris image")
    sizes = np.bincount(labels.ravel())[1:]
    blob = ndimage.binary_fill_holes(labels == (1 + int(np.argmax(sizes))))
    rows, cols = np.nonzero(blob)
    return float(rows.mean()), float(cols.mean()), float(np.sqrt(blob.sum() / np.pi))


def crop_iris(image: np.ndarray, size: int | None = 128, iris_to_pupil: float = 2.8,
              normalise: bool = True) -> np.ndarray:
    """Square crop centred on the pupil, covering the iris, with a percentile contrast stretch.

    Args:
        image: uint8 (H, W) iris image.
        size: Output side; None keeps the native crop size.
        iris_to_pupil: Half-side of the crop as a multiple of the pupil radius (iris radius is typically 2-4x
            the pupil's; 2.8 keeps the whole iris for a mid-dilated pupil).
        normalise: Stretch the 1st..99th percentile of the crop to 0..255 (removes illumination differences).

    Returns:
        uint8 (size, size).
    """
    if iris_to_pupil <= 0:
        raise ValueError(f"iris_to_pupil must be positive, got {iris_to_pupil}")
    gray = image if image.ndim == 2 else np.round(image.mean(axis=2)).astype(np.uint8)
    row, col, radius = detect_pupil(gray)
    half = iris_to_pupil * radius
    side = max(8, int(round(2 * half)))
    box = CropBox(int(round(row - half)), int(round(col - half)), side, side)
    out = crop_box_resize(gray, box, size, "area", fill=int(np.median(gray)))
    if normalise:
        low, high = np.percentile(out, [1, 99])
        if high > low:
            out = np.clip((out.astype(float) - low) * (255.0 / (high - low)), 0, 255).round().astype(np.uint8)
    return out


def resize_square(image: np.ndarray, size: int) -> np.ndarray:
    """Plain resize to (size, size) with area interpolation (no crop), e.g. for already-cropped images."""
    return crop_box_resize(image, CropBox(0, 0, image.shape[0], image.shape[1]), size, "area")
