"""What a person would notice of a written plot: a PNG of a readable size with something
drawn in it (Pillow, which matplotlib depends on, opens it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def assert_png_drawn(path: Path, *, min_width: int, min_height: int) -> None:
    """``path`` is a PNG at least ``min_width`` x ``min_height`` pixels whose middle
    (the axes, not the margins) holds many colours and a good share of non-white pixels:
    lines, markers and labels, not an empty frame."""
    with Image.open(path) as img:
        assert img.format == "PNG", img.format
        width, height = img.size
        assert width >= min_width and height >= min_height, img.size
        box = (width // 10, height // 10, width * 9 // 10, height * 9 // 10)
        middle = img.convert("RGB").crop(box)
    pixels = np.asarray(middle, dtype=np.int16).reshape(-1, 3)
    colours = len(np.unique(pixels, axis=0))
    non_white = int((pixels.min(axis=1) < 235).sum())
    assert colours >= 50, f"{colours} distinct colours: a blank plot"
    assert non_white >= 0.02 * len(pixels), \
        f"{non_white} of {len(pixels)} pixels drawn: a blank plot"
    # Colour, not only black text and grid: the series' lines.
    coloured = int((pixels.max(axis=1) - pixels.min(axis=1) > 60).sum())
    assert coloured >= 500, f"{coloured} coloured pixels: no series drawn"
