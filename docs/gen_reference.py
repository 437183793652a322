"""Write the generated reference pages: docs/reference/cli.md, pipeline-keys.md and
estimators.md, from the command line's parser, the pipeline schema and the estimator
registry (the rendering is ``elmscale.app.reference``); and the sparse ELM's speed figures
on the README and the docs pages from their results file (``docs/speed_figures.py``).

    python docs/gen_reference.py           # write the pages that changed
    python docs/gen_reference.py --check   # write nothing; exit 1 naming the stale pages

tests/test_docs_reference.py and tests/test_docs_speed.py fail when a committed page
differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's elmscale, installed or not

import speed_figures  # noqa: E402  (this folder's: run as a script, it is on the path)

from elmscale.app.reference import pages  # noqa: E402

OUT = ROOT / "docs" / "reference"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="compare only: exit 1 naming the stale pages"
    )
    args = parser.parse_args(argv)
    stale = []
    written = {OUT / name: text for name, text in pages().items()}
    written |= {ROOT / page: text for page, text in speed_figures.pages(ROOT).items()}
    for path, text in written.items():
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path.relative_to(ROOT).as_posix())
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check:
        if stale:
            print(
                "stale: " + ", ".join(stale) + " (run python docs/gen_reference.py)",
                file=sys.stderr,
            )
            return 1
        print("the generated pages are up to date")
        return 0
    print(("wrote " + ", ".join(stale)) if stale else "the generated pages are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
