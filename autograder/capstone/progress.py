"""The live line of `course train` and `course translate`: tqdm's meter (bar and time left), our figures."""
from __future__ import annotations

from tqdm import tqdm


def line(n: float, total: float, elapsed: float, figures: str, left: str = "left") -> str:
    """'\\r[####    ] <figures>  ~0:42 left': `n` of `total` done after `elapsed` seconds."""
    text = figures.replace("{", "{{").replace("}", "}}")
    meter = tqdm.format_meter(min(n, total), total, elapsed, ascii=" #",
                              bar_format="[{bar:24}] " + text + "  ~{remaining} " + left)
    return f"\r{meter}   "
