"""MkDocs hook: the measured results in ``benchmarks/results/`` are part of the site.

The performance and reproduction pages link to the files the benchmarks and ``elmscale
reproduce`` wrote (reports, rendered as pages outside the navigation; tables; figures), so
they are added to the build under ``results/`` as they are in the repository, instead of
being copied into ``docs/``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

PUBLISHED = {".md", ".png", ".txt", ".csv", ".html"}


def on_files(files, config):
    root = Path(config.config_file_path).parent / "benchmarks"
    for path in sorted((root / "results").rglob("*")):
        if path.is_file() and path.suffix in PUBLISHED:
            uri = path.relative_to(root).as_posix()
            files.append(File(uri, str(root), config.site_dir, config.use_directory_urls))
    return files
