"""A real headless Chromium for tests of the pages we write: the DOM after load, a screenshot and the
console messages of a local page. Chromium comes from Debian's ``chromium`` package (``scripts/ensure_browser.sh``,
run by ``make test``); ``find_chromium`` is None where none is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? (.*)")
SKIP_REASON = ("no Chromium on PATH: `bash scripts/ensure_browser.sh` installs Debian's chromium package "
               "(needs root and apt-get)")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _command(browser: str, profile: Path) -> list[str]:
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--window-size=1200,900"]


def _console(stderr: str) -> list[str]:
    return [m.group(1) for line in stderr.splitlines() if (m := CONSOLE.search(line))]


def dump_dom(browser: str, page: Path, profile: Path, fragment: str = "") -> tuple[str, list[str]]:
    """(the DOM after load, the console messages) of ``page``; ``profile`` is a fresh folder for Chromium;
    ``fragment``: appended to the page's URL after ``#`` (a page that reads its state from it)."""
    url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    done = subprocess.run([*_command(browser, profile), "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, _console(done.stderr)


def open_page(browser: str, page: Path, tmp_path: Path) -> tuple[str, Path, list[str]]:
    """(the DOM after load, a 1200x900 screenshot, the console messages of both loads) of ``page``."""
    dom, console = dump_dom(browser, page, tmp_path / "profile")
    shot = tmp_path / "page.png"
    snap = subprocess.run([*_command(browser, tmp_path / "profile"), f"--screenshot={shot}", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert snap.returncode == 0, snap.stderr[-2000:]
    return dom, shot, console + _console(snap.stderr)


def not_blank(png: Path) -> bool:
    """More than one colour, and at least 0.5% of the pixels differ from the most common (background) one."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    return len(colours) > 1 and 1.0 - counts.max() / counts.sum() >= 0.005
