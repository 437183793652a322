"""The generated reference pages (docs/reference/) against the code they document: the
committed files are what docs/gen_reference.py writes now, and the names they list (the
commands' arguments, the pipeline keys, the estimators) are the ones the code defines."""

import subprocess
import sys
from pathlib import Path

import pytest

from elmscale.app import reference
from elmscale.app.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))  # docs/speed_figures.py is no package's module
import speed_figures  # noqa: E402

REFERENCE = ROOT / "docs" / "reference"
REGENERATE = "run python docs/gen_reference.py"


def _committed(name: str) -> str:
    path = REFERENCE / name
    assert path.is_file(), f"docs/reference/{name} is missing: {REGENERATE}"
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_the_committed_page_is_what_the_generator_writes(name):
    assert _committed(name) == reference.PAGES[name](), (
        f"docs/reference/{name} differs from what the generator writes now: {REGENERATE}"
    )


def test_the_pages_are_deterministic():
    assert reference.pages() == reference.pages()


def test_the_documented_flags_are_the_parsers():
    documented = reference.documented_flags(_committed("cli.md"))
    problems = reference.flag_differences(documented, reference.defined_flags())
    assert not problems, "docs/reference/cli.md: " + "; ".join(problems) + f" ({REGENERATE})"
    assert {"elmscale", "elmscale run", "elmscale reproduce"} <= set(documented)
    assert {"--set", "--dry-run", "pipeline"} <= documented["elmscale run"]
    assert {"--param", "-p"} <= documented["elmscale train"]


def test_the_documented_pipeline_keys_are_the_schemas():
    documented = reference.documented_keys(_committed("pipeline-keys.md"))
    problems = reference.differences(documented, reference.defined_keys(), "pipeline key")
    assert not problems, "docs/reference/pipeline-keys.md: " + "; ".join(problems)
    assert {"run.task", "search.folds", "compute.workers", "data.generate.classes"} <= documented


@pytest.mark.parametrize("name", ["estimators.md", "pipeline-keys.md"])
def test_the_documented_estimators_are_the_registrys(name):
    documented = reference.documented_estimators(_committed(name))
    defined = reference.defined_estimators()
    problems = reference.differences(documented, defined, "estimator")
    assert not problems, f"docs/reference/{name}: " + "; ".join(problems)
    assert documented == defined  # once each, in the registry's order


# -- the checks can fail ---------------------------------------------------------------


def test_a_flag_added_to_the_parser_is_reported_as_undocumented():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    sub.choices["run"].add_argument("--frobnicate", action="store_true")
    documented = reference.documented_flags(_committed("cli.md"))
    assert reference.flag_differences(documented, reference.defined_flags(parser)) == [
        "elmscale run: --frobnicate is defined but not documented"
    ]


def test_a_row_removed_from_the_page_is_reported():
    lines = _committed("cli.md").splitlines()
    lines.remove(next(line for line in lines if line.startswith("| `--dry-run` |")))
    documented = reference.documented_flags("\n".join(lines))
    assert reference.flag_differences(documented, reference.defined_flags()) == [
        "elmscale run: --dry-run is defined but not documented"
    ]
    lines = _committed("pipeline-keys.md").splitlines()
    lines.remove(next(line for line in lines if line.startswith("| `data.generate.classes` |")))
    documented = reference.documented_keys("\n".join(lines))
    assert reference.differences(documented, reference.defined_keys(), "pipeline key") == [
        "pipeline key: data.generate.classes is defined but not documented"
    ]


def test_a_documented_name_the_code_lacks_is_reported():
    # the first --dry-run row only: `elmscale run`'s (reproduce has one too)
    text = _committed("cli.md").replace("| `--dry-run` |", "| `--dry-run`, `--dry` |", 1)
    documented = reference.documented_flags(text)
    assert reference.flag_differences(documented, reference.defined_flags()) == [
        "elmscale run: --dry is documented but not defined"
    ]
    text = _committed("estimators.md").replace("`ELMRegressor`", "`ELMRegresor`")
    assert reference.differences(
        reference.documented_estimators(text), reference.defined_estimators(), "estimator"
    ) == [
        "estimator: ELMRegressor is defined but not documented",
        "estimator: ELMRegresor is documented but not defined",
    ]


def test_the_check_mode_names_a_stale_page_and_writes_nothing(tmp_path):
    """--check on a copy of the docs folder with one page edited: exit 1 naming it."""
    script = ROOT / "docs" / "gen_reference.py"
    copy = tmp_path / "docs"
    (copy / "reference").mkdir(parents=True)
    (copy / "gen_reference.py").write_text(script.read_text())
    (tmp_path / "elmscale").symlink_to(ROOT / "elmscale")
    # the speed figures it also writes (docs/speed_figures.py): their module, file and pages
    for path in [
        "docs/speed_figures.py",
        *speed_figures.SOURCES,
        *speed_figures.PAGES,
    ]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    for name, text in reference.pages().items():
        (copy / "reference" / name).write_text(text)
    stale = copy / "reference" / "estimators.md"
    stale.write_text(stale.read_text() + "edited\n")
    run = subprocess.run(
        [sys.executable, str(copy / "gen_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    assert "docs/reference/estimators.md" in run.stderr and "cli.md" not in run.stderr
    assert "README.md" not in run.stderr
    assert stale.read_text().endswith("edited\n")


# -- the pipeline schema is the checks' source -----------------------------------------


def test_every_declared_key_refuses_a_value_of_another_type_with_its_words(tmp_path):
    """A value of the wrong type for each key is refused with the words the reference
    shows as its allowed values / type; a key's default is accepted."""
    from elmscale.app.pipeline import SPEC, load_pipeline

    for section, keys in SPEC.items():
        for name, key in keys.items():
            if key.default is not None:
                assert key.accepts(key.default), f"{section}.{name}"
            wrong = [1.5] if key.type != "list of strings" else 1.5
            path = tmp_path / f"{section}-{name}.toml"
            path.write_text(f"[{section}]\n{name} = {wrong!r}\n")
            problems = load_pipeline(path).problems
            assert f"{section}.{name} = {wrong!r}; expected {key.expectation()}" in problems, (
                section,
                name,
                problems,
            )
