"""Screenshots of two pages of the built site, in headless Chromium.

    mkdocs build --strict --site-dir /tmp/site
    python docs/screenshots.py /tmp/site              # writes docs/screenshots/*.png

Needs Chromium (Debian: ``apt-get install chromium``).  The pages are opened from the
built files (file:// URLs); the flags keep Chromium off the network, as the machine has
none.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PAGES = {
    "getting-started": "getting-started/index.html",
    "flsa-svm": "guide/flsa-svm/index.html",
}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,2200",
]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    site = Path(argv[0] if argv else "site").resolve()
    out = Path(__file__).resolve().parent / "screenshots"
    out.mkdir(exist_ok=True)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium not found: apt-get install chromium")
    for name, page in PAGES.items():
        target = out / f"{name}.png"
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [
                    browser,
                    *FLAGS,
                    f"--user-data-dir={profile}",
                    f"--screenshot={target}",
                    (site / page).as_uri(),
                ],
                check=True,
                timeout=120,
                capture_output=True,
            )
        print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
