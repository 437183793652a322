"""The documentation's reference pages, rendered from the code that defines what they list.

* :func:`cli_reference`: ``docs/reference/cli.md``, every ``elmscale`` command of
  :func:`elmscale.app.cli.build_parser` (sub-commands of sub-commands too) with its usage
  line and a table of its arguments;
* :func:`pipeline_reference`: ``docs/reference/pipeline-keys.md``, a table per section of
  :data:`elmscale.app.pipeline.SPEC` (and ``data.generate``'s sub-keys), and the names
  ``model.estimator`` takes;
* :func:`estimators_reference`: ``docs/reference/estimators.md``, the registry's
  capabilities, a row per estimator.

``docs/gen_reference.py`` writes them (``--check``: only compares).  The functions are pure
and their output deterministic: no dates, no addresses, nothing of the machine (a default
the run resolves from the machine is declared as words, ``Key.default_text``).  The
``documented_*`` functions read the names back out of a page and :func:`differences`
compares them with the code's, for the tests that keep the two equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re

from elmscale import registry
from elmscale.app.pipeline import GENERATE, SPEC, Key

__all__ = [
    "PAGES",
    "cli_reference",
    "defined_estimators",
    "defined_flags",
    "defined_keys",
    "differences",
    "documented_estimators",
    "documented_flags",
    "documented_keys",
    "estimators_reference",
    "flag_differences",
    "pages",
    "pipeline_reference",
]

WIDTH = 88  # the usage lines' width (argparse's would be the terminal's)
NONE = "—"
GENERATOR = "python docs/gen_reference.py"


# -- Markdown --------------------------------------------------------------------------


def _code(text) -> str:
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_ESCAPED = str.maketrans({c: "\\" + c for c in "\\`*_[]|"} | {"<": "&lt;", "$": "&#36;"})


def _text(text) -> str:
    """Plain text (argparse's help, an error's words) as Markdown that shows it as is."""
    return " ".join(str(text).split()).translate(_ESCAPED)


def _cell(markdown: str) -> str:
    """Markdown written for the page, made safe inside a table cell."""
    return " ".join(markdown.split()).replace("|", "\\|") or NONE


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _rst_to_markdown(text: str) -> str:
    """A docstring's reST roles and literals as Markdown (``x`` and :class:`~a.B`)."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: _code(m[1].split(".")[-1].strip()), text)
    return text.replace("``", "`")


def _summary(obj) -> str:
    """The first paragraph of ``obj``'s docstring, on one line."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _page(title: str, source: str, body: list[str]) -> str:
    comment = f"<!-- Generated from {source} by `{GENERATOR}`: do not edit by hand. -->"
    return "\n\n".join([f"# {title}", comment, *body]).rstrip() + "\n"


def _tables(markdown: str):
    """``(heading, header cells, rows of cells)`` of every pipe table in ``markdown``."""
    heading, table = "", None
    for line in markdown.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if not line.startswith("|"):
            if table is not None:
                yield table
            table = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        if table is None:
            table = (heading, cells, [])
        elif not all(set(c) <= set("-: ") for c in cells):
            table[2].append(cells)
    if table is not None:
        yield table


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def differences(documented, defined, what: str) -> list[str]:
    """What one side names and the other does not, a line each."""
    documented, defined = set(documented), set(defined)
    return [f"{what}: {n} is defined but not documented" for n in sorted(defined - documented)] + [
        f"{what}: {n} is documented but not defined" for n in sorted(documented - defined)
    ]


# -- the command line ------------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser):
    """``(parser, help)`` of ``parser`` and of every sub-command under it, depth first."""

    def walk(p, help_text):
        yield p, help_text
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name, sub in action.choices.items():
                    yield from walk(sub, helps.get(name))

    yield from walk(parser, None)


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a table lists: all but ``--help`` and the sub-command choice."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]


def _argument_names(action: argparse.Action) -> list[str]:
    if action.option_strings:
        return list(action.option_strings)
    return [action.metavar if isinstance(action.metavar, str) else action.dest]


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        return action.metavar
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def _takes(action: argparse.Action) -> str:
    """What the argument takes, as argparse's usage writes it ("" for a switch)."""
    if action.nargs == 0:
        return ""
    m = _metavar(action)
    return {
        None: m,
        "?": f"[{m}]",
        "*": f"[{m} ...]",
        "+": f"{m} [{m} ...]",
        argparse.PARSER: f"{m} ...",
        argparse.REMAINDER: "...",
    }.get(action.nargs, " ".join([m] * action.nargs) if isinstance(action.nargs, int) else m)


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line, wrapped at ``WIDTH`` columns (the terminal's width does not count)."""
    parts = []
    for action in parser._actions:  # optionals, then positionals
        if action.option_strings and action.help is not argparse.SUPPRESS:
            part = " ".join(filter(None, [action.option_strings[0], _takes(action)]))
            parts.append(part if action.required else f"[{part}]")
    parts += [_takes(a) for a in parser._actions if not a.option_strings]
    head = f"usage: {parser.prog}"
    lines, line = [], head
    for part in parts:
        if len(line) + 1 + len(part) > WIDTH and line.strip():
            lines.append(line)
            line = " " * len(head)
        line += " " + part
    return "\n".join([*lines, line])


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:  # argparse's %(default)s, %(prog)s ...
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        params["prog"] = prog
        if action.choices is not None:
            params["choices"] = ", ".join(map(str, action.choices))
        text = text % params
    return text


_TYPES = {int: "integer", float: "number"}


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        value = NONE
    elif action.choices is not None:
        many = action.nargs in ("+", "*")
        value = ("one or more of " if many else "one of ") + ", ".join(
            _code(c) for c in action.choices
        )
    elif not action.option_strings:
        value = {"?": "optional", "+": "one or more", "*": "any number"}.get(action.nargs, "")
    else:
        value = _code(_takes(action))
    if action.type in _TYPES:
        value += f" ({_TYPES[action.type]})"
    if isinstance(action, argparse._AppendAction) and "repeatable" not in (action.help or ""):
        value += " (repeatable)"
    return value.strip() or NONE


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is argparse.SUPPRESS or action.nargs == 0:
        return NONE
    return _code(default)


def cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """``docs/reference/cli.md``: every command of ``parser`` (the ``elmscale`` one)."""
    if parser is None:
        from elmscale.app.cli import build_parser

        parser = build_parser()
    body = [
        "Every command below also takes `-h` / `--help`.  Exit codes: 0 done; 1 a runtime "
        "error (bad data in a file, a bad model file); 2 a usage error (an unknown option, "
        "an invalid value, a missing input file, a bad pipeline file); 130 interrupted "
        "(Ctrl-C: the clusters the command started are shut down first).  Defaults are "
        "the parser's own values; where a help text says a default depends on the machine "
        "(say, all cores), it is resolved when the command runs."
    ]
    for command, help_text in _commands(parser):
        section = [f"## {_code(command.prog)}"]
        about = [t for t in (help_text, command.description) if t]
        if about:
            section.append(" ".join(_text(t[0].upper() + t[1:].rstrip(".") + ".") for t in about))
        section.append("```text\n" + _usage(command) + "\n```")
        subs = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subs:
            helps = {a.dest: a.help for a in action._choices_actions}
            rows = [
                [_code(f"{command.prog} {name}"), _text(helps.get(name) or "")]
                for name in action.choices
            ]
            section.append(_table(["Command", "Description"], rows))
        rows = [
            [
                ", ".join(_code(n) for n in _argument_names(a)),
                _value(a),
                _default(a),
                _text(_help(a, command.prog)),
            ]
            for a in _arguments(command)
        ]
        if rows:
            section.append(_table(["Argument", "Value", "Default", "Description"], rows))
        body.append("\n\n".join(section))
    return _page("Command line", "`elmscale.app.cli.build_parser()`", body)


def defined_flags(parser: argparse.ArgumentParser | None = None) -> dict[str, set[str]]:
    """Per command (``"elmscale run"``), the option strings and positional names it
    defines (not ``--help``, not the sub-command choice)."""
    if parser is None:
        from elmscale.app.cli import build_parser

        parser = build_parser()
    return {
        p.prog: {n for a in _arguments(p) for n in _argument_names(a)} for p, _ in _commands(parser)
    }


def documented_flags(markdown: str) -> dict[str, set[str]]:
    """Per command, the arguments the tables of a ``cli.md`` page list."""
    found: dict[str, set[str]] = {}
    for heading, header, rows in _tables(markdown):
        if header[0] == "Argument" and _names(heading):
            found.setdefault(_names(heading)[0], set()).update(
                n for row in rows for n in _names(row[0])
            )
    for line in markdown.splitlines():  # a command whose table is empty or gone
        if line.startswith("## ") and _names(line):
            found.setdefault(_names(line)[0], set())
    return found


def flag_differences(documented: dict[str, set[str]], defined: dict[str, set[str]]) -> list[str]:
    """The commands and, per command, the arguments that one side has and the other not."""
    out = differences(documented, defined, "command")
    for command in sorted(set(documented) & set(defined)):
        out += differences(documented[command], defined[command], command)
    return out


# -- pipeline files --------------------------------------------------------------------


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _key_row(name: str, key: Key) -> list[str]:
    if key.default is None:
        default = key.default_text or "unset"
    else:
        default = _code(_toml(key.default))
    if key.choices:
        allowed = ", ".join(_code(_toml(c)) for c in key.choices)
    elif key.keys is not None:
        allowed = "the sub-keys " + ", ".join(_code(k) for k in key.keys)
    elif key.expected:
        allowed = _text(key.expected)
    elif key.minimum is not None:
        allowed = f"≥ {key.minimum}"
    else:
        allowed = NONE
    return [_code(name), key.type, default, allowed, key.description]


_KEY_HEADER = ["Key", "Type", "Default", "Allowed values", "Description"]
_ESTIMATOR = "Estimator"


def pipeline_reference() -> str:
    """``docs/reference/pipeline-keys.md``: every key of ``SPEC``, and the estimators."""
    body = [
        "A pipeline file is TOML with the sections below; `elmscale validate FILE` checks one "
        "and `elmscale run FILE` runs it.  Every key may be left out (its default then "
        "holds; *unset* means no value) and can be given on the command line too: "
        "`--set section.key=value`, the value in TOML syntax (`--set 'search.grid={C=[1,10]}'`"
        ", `--set model.params.C=10`).  Relative paths are taken from the current "
        "directory.  Everything is checked before anything runs: an unknown key (with the "
        "closest valid name), a value of the wrong type or out of its allowed values, a "
        "missing file, a parameter the estimator rejects; the checks of a key's type and "
        "allowed values are made from the same declarations as these tables.",
    ]
    for section, keys in SPEC.items():
        rows = [_key_row(f"{section}.{name}", key) for name, key in keys.items()]
        body.append(f"## `[{section}]`\n\n" + _table(_KEY_HEADER, rows))
        for name, key in keys.items():
            if key.keys is not None:
                rows = [_key_row(f"{section}.{name}.{k}", sub) for k, sub in key.keys.items()]
                body.append(
                    f"### `{section}.{name}`\n\n"
                    f"A table: `{name} = {{ {', '.join(f'{k} = ...' for k in key.keys)} }}`.\n\n"
                    + _table(_KEY_HEADER, rows)
                )
    rows = [[_code(e.name), e.capabilities.task] for e in registry.entries()]
    body.append(
        "## Estimators\n\n"
        "The names `model.estimator` takes (the registered estimators; their capabilities "
        "are in [Estimator registry](estimators.md)):\n\n" + _table([_ESTIMATOR, "Task"], rows)
    )
    return _page("Pipeline file keys", "`elmscale.app.pipeline.SPEC`", body)


def defined_keys() -> set[str]:
    """Every ``section.key`` of ``SPEC``, and ``data.generate.<sub-key>``."""
    keys = {f"{section}.{name}" for section, names in SPEC.items() for name in names}
    return keys | {f"data.generate.{name}" for name in GENERATE}


def documented_keys(markdown: str) -> set[str]:
    """The ``section.key`` names the key tables of a ``pipeline-keys.md`` page list."""
    return {
        name
        for _, header, rows in _tables(markdown)
        if header[0] == "Key"
        for row in rows
        for name in _names(row[0])
    }


# -- the estimator registry ------------------------------------------------------------

_CAPABILITY_HEADERS = {
    "task": "Task",
    "c_path": "C path",
    "path_param": "Path parameter",
    "parquet_fit": "Fits Parquet on Dask",
    "parquet_cv": "Cross-validates Parquet",
    "grid_pieces": "Grid pieces",
    "ray_fit": "Fans out on Ray",
    "paper_grid": "Paper grid",
}


def _capability(value) -> str:
    if value is True:
        return "yes"
    if value is False or value is None:
        return NONE
    if callable(value):
        return _rst_to_markdown(_summary(value)) or "depends on the parameters"
    if isinstance(value, str) and ":" in value:  # "module:function"
        return _code(value.rpartition(":")[2])
    return _code(value)


def _capability_docs() -> dict[str, str]:
    """``Capabilities``'s docstring, ``name : text`` entries, as Markdown."""
    doc = inspect.getdoc(registry.Capabilities) or ""
    found, name = {}, None
    for line in doc.splitlines():
        match = re.match(r"^(\w+) : (.*)", line)
        if match:
            name = match[1]
            found[name] = match[2]
        elif name and line.startswith(" "):
            found[name] += " " + line.strip()
        else:
            name = None
    return {k: _rst_to_markdown(re.sub(r"\.\s+(?=\w)", ". ", v)) for k, v in found.items()}


def estimators_reference() -> str:
    """``docs/reference/estimators.md``: a row per registered estimator."""
    fields = [f.name for f in dataclasses.fields(registry.Capabilities)]
    docs = _capability_docs()
    header = [_ESTIMATOR, *(_CAPABILITY_HEADERS.get(f, _code(f)) for f in fields), "Summary"]
    rows = []
    for entry in registry.entries():
        caps = [_capability(getattr(entry.capabilities, f)) for f in fields]
        rows.append([_code(entry.name), *caps, _rst_to_markdown(_summary(entry.load()))])
    columns = "\n".join(
        f"- **{_CAPABILITY_HEADERS.get(f, f)}** (`{f}`): {docs.get(f, NONE)}" for f in fields
    )
    body = [
        "`elmscale.registry` lists every estimator the commands know: the names a pipeline "
        "file's `model.estimator` and `elmscale train --estimator` take, and the classes a "
        "model file may rebuild.  The runner and the grid search read an estimator's "
        "capabilities here instead of testing its class.",
        _table(header, rows),
        "The columns (from `elmscale.registry.Capabilities`):\n\n" + columns,
        "Another estimator is one `elmscale.registry.register` call: "
        '`register(EstimatorEntry("MyClassifier", "mypackage.models:MyClassifier", '
        'Capabilities(task="classifier")))`.',
    ]
    return _page("Estimator registry", "`elmscale.registry`", body)


def defined_estimators() -> list[str]:
    return list(registry.names())


def documented_estimators(markdown: str) -> list[str]:
    """The estimator names the ``Estimator`` tables of a page list, in order."""
    return [
        name
        for _, header, rows in _tables(markdown)
        if header[0] == _ESTIMATOR
        for row in rows
        for name in _names(row[0])
    ]


# -- the pages -------------------------------------------------------------------------

PAGES = {
    "cli.md": cli_reference,
    "pipeline-keys.md": pipeline_reference,
    "estimators.md": estimators_reference,
}


def pages() -> dict[str, str]:
    """``{file name under docs/reference/: Markdown}`` of every generated page."""
    return {name: render() for name, render in PAGES.items()}
