#!/usr/bin/env python3
"""Shrink the browser tests' dashboard screenshots for the docs: 1000 px wide, 128 colours
(about a third of the bytes, still legible). `make docs-screenshots` runs it.

    scripts/shrink_screenshots.py SRC_DIR DEST_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image  # Pillow: matplotlib's dependency, in .venv


def main(src: Path, dest: Path) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    shots = sorted(src.glob("*.png"))
    if not shots:
        print(f"no screenshots in {src}: did the browser tests run?", file=sys.stderr)
        return 1
    for path in shots:
        image = Image.open(path).convert("RGB")
        width, height = image.size
        image = image.resize((1000, round(height * 1000 / width)), Image.LANCZOS)
        image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(dest / path.name, optimize=True)
        print(f"{dest / path.name}: {(dest / path.name).stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
