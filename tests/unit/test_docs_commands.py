"""Every command shown in README.md, docs/*.md and docs/benchmarks/ exists (issue 31): make targets and variables
(parsed from the Makefile), `trinity` subcommands, actions and flags (introspected from trinity.cli.build_parser, and
parsed by it when the command is concrete), config keys and group options used as overrides (checked
against the composed config, composed with the command's own group choices), flows modules and benchmark
scripts with their flags. Fast: no subprocess, no network; one composition per distinct set of group
choices, and only when a key is not in the default composition.

Commands are read from fenced shell blocks (one command per line, `\\` continuations joined, `&&` / `;` /
`|` split) and from inline code spans that start with a known program or consist of overrides only.
`<...>` is a placeholder: its value is not checked, the rest of the command is. A table row's synopsis
(`trinity pool up \\| down \\| status`, `[--items N]`) is checked for its subcommand, actions and flags.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[2]
PH = "PLACEHOLDERX"           # what a `<...>` placeholder becomes before tokenising
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}
TRINITY = {"trinity", ".venv/bin/trinity", "$(BIN)/trinity"}
PYTHON = {"python", "python3", ".venv/bin/python", "$(BIN)/python"}
DVC = {"dvc", ".venv/bin/dvc", "$(BIN)/dvc"}
OVERRIDE = re.compile(r"^\+{0,2}[a-z_][a-z0-9_]*(?:[./][A-Za-z0-9_-]+)*=")


def doc_files() -> list[Path]:
    """README, the guides, and every page under docs/benchmarks (its index and each benchmark's own page)."""
    docs = REPO / "docs"
    return [REPO / "README.md", *sorted(docs.glob("*.md")), *sorted((docs / "benchmarks").rglob("*.md"))]


@dataclass(frozen=True)
class Shown:
    where: str          # file:line
    text: str           # the command as shown (placeholders replaced)
    synopsis: bool = False
    inline: bool = False   # a code span in prose: may name a command without its required arguments


# --- reading commands out of markdown ---------------------------------------------------------------

def _placeholders(text: str) -> str:
    """`<your pool>`, and an ALL-CAPS word standing alone (`PATH`, `STAGE...`, `V`), become PH; an
    environment variable (`CRON=`, `$PWD`, `PATH=...`) does not."""
    text = re.sub(r"<[A-Za-z][^<>\n]*?>", PH, text)
    return re.sub(r"(?<![\w$/.=:-])[A-Z][A-Z_]*(?:\.\.\.)?(?![\w=/.:-])", PH, text)


@cache
def top_level_keys() -> frozenset[str]:
    return frozenset(composed(()).keys()) | groups()


def _is_override_span(span: str) -> bool:
    """A code span of overrides only, whose keys start with a config key or group (`pool=local`,
    `evolve.fitness.estimate=exact`), not any `name=value` (`stream=True`, `phase=validation`)."""
    words = span.split()
    return bool(words) and all(OVERRIDE.match(w) and re.split(r"[./=]", w.lstrip("+"))[0] in top_level_keys()
                               for w in words)


def commands_in(text: str, name: str) -> list[Shown]:
    out: list[Shown] = []
    lines = text.split("\n")
    fence: str | None = None
    pending = ""
    for no, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip().lower()
            pending = ""
            continue
        if fence is not None:
            if fence in SHELL_LANGS and stripped:
                joined = pending + stripped
                if joined.endswith("\\"):
                    pending = joined[:-1] + " "
                    continue
                pending = ""
                out.append(Shown(f"{name}:{no}", _placeholders(joined)))
            continue
        for span in re.findall(r"`([^`\n]+)`", line):
            span = span.replace("\\|", "|").strip()
            first = span.split()[0] if span.split() else ""
            if first in TRINITY or first in ("make", "dvc", ".venv/bin/dvc") or first in PYTHON:
                synopsis = first in TRINITY and ("[" in span or " | " in span)
                out.append(Shown(f"{name}:{no}", _placeholders(span), synopsis=synopsis, inline=True))
            elif _is_override_span(span):
                out.append(Shown(f"{name}:{no}", _placeholders(span), inline=True))
    return out


def all_shown() -> list[Shown]:
    return [c for path in doc_files() for c in commands_in(path.read_text(), path.relative_to(REPO).as_posix())]


def tokens(command: str) -> list[list[str]]:
    """Shell words of each simple command (split at && || ; |), comments dropped."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    out, cur = [], []
    try:
        words = list(lex)
    except ValueError:      # an unbalanced quote: not a command we can read
        return []
    for w in words:
        if w in ("&&", "||", ";", "|", "&"):
            out.append(cur)
            cur = []
        else:
            cur.append(w)
    out.append(cur)
    return [c for c in out if c]


# --- what exists ------------------------------------------------------------------------------------

@cache
def makefile() -> tuple[frozenset[str], frozenset[str]]:
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z0-9_-]+):(?!=)", text, re.M))
    variables = set(re.findall(r"^(?:export\s+)?([A-Z_][A-Z0-9_]*)\s*[?:]?=", text, re.M))
    return frozenset(targets), frozenset(variables)


@cache
def parser():
    from trinity.cli import build_parser

    return build_parser()


def subparsers() -> dict:
    ap = parser()
    action = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    return dict(action.choices)


@cache
def dvc_stages() -> frozenset[str]:
    import yaml

    return frozenset(yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"])


@cache
def groups() -> frozenset[str]:
    """Config groups: folders of conf/ holding option files (pool/profile included)."""
    conf = REPO / "conf"
    return frozenset(p.parent.relative_to(conf).as_posix() for p in conf.rglob("*.yaml") if p.parent != conf)


@cache
def composed(group_choices: tuple[str, ...]) -> DictConfig:
    from trinity import config

    return config.compose(list(group_choices), validate_cfg=False)


# --- checks (each returns a list of problems; empty = fine) -----------------------------------------

def _missing(cfg: DictConfig, parts: list[str], plus: int) -> str | None:
    """The first part of a dotted key the config lacks (None: it is there, or `+` adds its last part)."""
    node = cfg
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig) or part not in node:
            if i == len(parts) - 1 and plus and isinstance(node, DictConfig):
                return None
            return ".".join(parts[: i + 1])
        try:
            node = node[part]
        except Exception:       # an interpolation that needs the rest of a run: the key is there
            return None
    return None


def check_override(token: str, group_choices: tuple[str, ...] = ()) -> list[str]:
    plus = len(token) - len(token.lstrip("+"))
    key, _, value = token.lstrip("+").partition("=")
    if key in groups():
        if PH in value:
            return []
        return [] if (REPO / "conf" / key / f"{value}.yaml").exists() else [f"no option '{value}' in group '{key}'"]
    if "/" in key:
        return [f"no config group '{key}'"]
    parts = key.split(".")
    if PH in parts:              # only what comes before the placeholder must exist
        parts, plus = parts[: parts.index(PH)], 0
    missing = _missing(composed(()), parts, plus)
    if missing is not None and group_choices:
        missing = _missing(composed(tuple(group_choices)), parts, plus)
    return [] if missing is None else [f"no config key '{missing}' (for {token!r})"]


def _override_groups(words: list[str]) -> tuple[str, ...]:
    return tuple(w for w in words if "=" in w and w.partition("=")[0] in groups() and PH not in w)


def check_overrides(words: list[str], extra_groups: tuple[str, ...] = ()) -> list[str]:
    choices = extra_groups + _override_groups(words)
    return [p for w in words if OVERRIDE.match(w) for p in check_override(w, choices)]


def check_make(words: list[str]) -> list[str]:
    targets, variables = makefile()
    problems, overrides, extra = [], [], ()
    for w in words[1:]:
        if w.startswith("-"):
            continue
        if "=" in w:
            var, _, value = w.partition("=")
            if var not in variables:
                problems.append(f"make variable {var} is not in the Makefile")
            elif var == "EXPERIMENT":
                if PH not in value and not (REPO / "conf/experiment" / f"{value}.yaml").exists():
                    problems.append(f"no experiment '{value}' (EXPERIMENT=)")
                elif PH not in value:
                    extra = (f"experiment={value}",)
            elif var == "OVERRIDES":
                overrides = shlex.split(value)
        elif w not in targets:
            problems.append(f"no make target '{w}'")
    bad = [w for w in overrides if not OVERRIDE.match(w) and w.strip(".")]
    problems += [f"OVERRIDES holds {w!r}, not key=value" for w in bad]
    return problems + check_overrides([w for w in overrides if w.strip(".")], extra)


def _takes_value(action) -> bool:
    return action.nargs != 0


def check_trinity(words: list[str], synopsis: bool = False, inline: bool = False) -> list[str]:
    subs = subparsers()
    ap = parser()
    args = words[1:]
    while args and args[0].startswith("-"):          # global options: --log-level debug, --version
        opt = args.pop(0).split("=")[0]
        action = ap._option_string_actions.get(opt)
        if action is None:
            return [f"trinity has no global option {opt}"]
        if _takes_value(action) and args and "=" not in opt:
            args.pop(0)
    if not args or args[0] == PH:
        return []
    name, args = args[0], args[1:]
    if name not in subs:
        return [f"no trinity subcommand '{name}'"]
    sub = subs[name]
    problems: list[str] = []
    choices = [a for a in sub._actions if not a.option_strings and a.choices and a.dest != "overrides"]
    positional = 0
    skip = False
    for w in args:
        if skip:
            skip = False
            continue
        if w.startswith("-"):
            opt = w.split("=")[0]
            if opt not in sub._option_string_actions:
                problems.append(f"trinity {name} has no option {opt}")
            elif _takes_value(sub._option_string_actions[opt]) and "=" not in w and not synopsis:
                skip = True
            continue
        if OVERRIDE.match(w) or PH in w or w.strip(".") == "":
            continue
        if synopsis:
            word = w.strip(".")
            if word and word.islower() and choices and word not in choices[0].choices:
                problems.append(f"trinity {name}: '{word}' is not one of {sorted(choices[0].choices)}")
            continue
        if name == "run":
            if w not in dvc_stages():
                problems.append(f"trinity run: no stage '{w}'")
        elif positional < len(choices) and w not in choices[positional].choices:
            problems.append(f"trinity {name}: '{w}' is not one of {sorted(choices[positional].choices)}")
        positional += 1
    if not synopsis:
        problems += check_overrides(args)
        if not problems and not inline and not any(PH in w for w in args):
            problems += _real_parse(words[1:])
    return problems


def _real_parse(argv: list[str]) -> list[str]:
    """The CLI's own parse (as trinity.cli.main does it): leftovers must be overrides."""
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, rest = parser().parse_known_args(argv)
    except SystemExit:
        return [f"trinity's parser refuses {' '.join(argv)!r}: {err.getvalue().strip().splitlines()[-1]}"]
    bad = [a for a in rest if a.startswith("-") or "=" not in a]
    return [f"trinity's parser leaves {bad} unparsed"] if bad else []


def check_python(words: list[str]) -> list[str]:
    args = words[1:]
    if args[:1] == ["-m"] and len(args) > 1:
        module = args[1]
        if PH in module:
            return []
        path = REPO / (module.replace(".", "/") + ".py")
        if not path.exists() and not (REPO / module.replace(".", "/") / "__init__.py").exists():
            return [f"no module {module}"]
        rest = args[2:]
        problems = [f"{module} has no option {w.split('=')[0]}" for w in rest
                    if w.startswith("--") and w.split("=")[0] not in path.read_text()]
        return problems + (check_overrides(rest) if module.startswith("flows.") else [])
    if args and args[0].endswith(".py"):
        path = REPO / args[0]
        if not path.exists():
            return [f"no script {args[0]}"]
        text = path.read_text()
        return [f"{args[0]} has no option {w.split('=')[0]}" for w in args[1:]
                if w.startswith("--") and f'"{w.split("=")[0]}"' not in text]
    return []


def check_dvc(words: list[str]) -> list[str]:
    args = words[1:]
    if args[:2] != ["exp", "run"]:
        return []
    sets = [args[i + 1] for i, w in enumerate(args[:-1]) if w in ("-S", "--set-param")]
    return check_overrides(sets)


def check(shown: Shown) -> list[str]:
    if shown.synopsis:          # `|` separates alternatives, `[...]` marks options: words, not shell syntax
        words = [w.strip("[]") for w in shown.text.replace("|", " ").split()]
        return check_trinity([w for w in words if w], synopsis=True)
    problems = []
    for words in tokens(shown.text):
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):   # PATH=... dvc ..., VAR=... make ...
            words = words[1:]
        if not words:
            continue
        prog = words[0]
        if prog == "time":
            words, prog = words[1:], (words[1] if len(words) > 1 else "")
        if prog == "make":
            problems += check_make(words)
        elif prog in TRINITY:
            problems += check_trinity(words, shown.synopsis, shown.inline)
        elif prog in PYTHON:
            problems += check_python(words)
        elif prog in DVC:
            problems += check_dvc(words)
        elif OVERRIDE.match(prog):
            problems += check_overrides(words)
    return problems


# --- the tests --------------------------------------------------------------------------------------

def test_the_checker_finds_wrong_commands():
    """Each helper, applied to a deliberately wrong sample, reports it (and passes the right one)."""
    wrong = {
        "make rnu": "no make target 'rnu'",
        "make run EXPRIMENT=local_small": "make variable EXPRIMENT",
        "make run EXPERIMENT=local_smal": "no experiment 'local_smal'",
        "make run OVERRIDES='evolve.sigma=0.1'": "no config key 'evolve.sigma'",
        ".venv/bin/trinity pool calbrate": "'calbrate' is not one of",
        "trinity evl --coordinator x": "no trinity subcommand 'evl'",
        "trinity eval --coordinatr data/evolve/coordinator": "has no option --coordinatr",
        "trinity run evolv": "no stage 'evolv'",
        "trinity run evolve evolve.generatons=3": "no config key 'evolve.generatons'",
        "trinity serve --port 8000": "parser refuses",                   # no --coordinator/--frontier/--registry
        "trinity config pool=nope": "no option 'nope' in group 'pool'",
        "tasks.local_files.gsm8k=/x.jsonl": "no config key 'tasks.local_files.gsm8k'",   # needs the `+`
        "python -m flows.evolv": "no module flows.evolv",
        ".venv/bin/python benchmarks/routing_benchmark.py --compare x --generatons 3": "has no option --generatons",
        'PATH="$PWD/.venv/bin:$PATH" dvc exp run -S evolve.sigma00=1': "no config key 'evolve.sigma00'",
    }
    for command, expected in wrong.items():
        problems = check(Shown("sample", _placeholders(command)))
        assert any(expected in p for p in problems), (command, problems)
    synopsis = Shown("sample", "trinity pool up | dwn | status [--itemz N]", synopsis=True)
    assert {"'dwn' is not one of", "no option --itemz"} <= {m for p in check(synopsis) for m in
                                                            ("'dwn' is not one of", "no option --itemz") if m in p}
    right = ["make run EXPERIMENT=local_live OVERRIDES='+tasks.local_files.gsm8k=/x.jsonl evolve.generations=2'",
             "trinity pool calibrate --items 10 --output conf/pool/profile/mine.yaml pool=<your pool>",
             "trinity serve --coordinator data/evolve/coordinator --port 8700 serve.routing=sample",
             "make deploy CRON='0 3 * * 1'", "trinity config experiment=routing_benchmark pool/profile=dominant"]
    for command in right:
        assert check(Shown("sample", _placeholders(command))) == [], command


def test_the_docs_show_commands_at_all():
    shown = all_shown()
    assert len(shown) > 100
    assert any("make run" in s.text for s in shown) and any("trinity serve" in s.text for s in shown)


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_command_shown_exists(path):
    problems = [f"{s.where}: {s.text!r}: {p}" for s in commands_in(path.read_text(), path.relative_to(REPO).as_posix())
                for p in check(s)]
    assert not problems, "\n".join(problems)


def test_the_readme_reference_lists_every_make_target_and_trinity_command():
    readme = (REPO / "README.md").read_text()
    helped = re.findall(r"^([A-Za-z0-9_-]+):.*## ", (REPO / "Makefile").read_text(), re.M)
    assert helped
    missing = [t for t in helped if f"`make {t}`" not in readme]
    assert not missing, f"README's reference table lacks make targets {missing}"
    missing = [c for c in subparsers() if f"`trinity {c}" not in readme]
    assert not missing, f"README's reference table lacks trinity commands {missing}"


def test_the_benchmarks_index_shows_every_script_with_a_command():
    """docs/benchmarks/README.md has one row per script in benchmarks/, whose command runs that script (checked
    like every other command above), and no row for a script that is gone."""
    index = REPO / "docs/benchmarks/README.md"
    rows = {m.group(1): line for line in index.read_text().splitlines()
            if (m := re.match(r"^\| `(\w+\.py)` \|", line))}
    scripts = {p.name for p in (REPO / "benchmarks").glob("*.py")}
    assert scripts, "no benchmark scripts found"
    assert sorted(scripts - rows.keys()) == [], "benchmarks missing from the index"
    assert sorted(rows.keys() - scripts) == [], "the index lists scripts that do not exist"
    shown = {s.text for s in commands_in(index.read_text(), "docs/benchmarks/README.md")}
    no_command = [name for name, line in rows.items()
                  if not any(f"benchmarks/{name}" in text and text in line for text in shown)]
    assert no_command == [], f"index rows without a command that runs their script: {no_command}"


def indented_commands(text: str) -> list[int]:
    """Lines of an indented (unfenced) code block that start with a program this checker reads: such a block
    is not read above, so a command in one would go unchecked."""
    lines, fence, found = text.split("\n"), False, []
    for no, line in enumerate(lines, 1):
        if line.strip().startswith("```"):
            fence = not fence
            continue
        words = line.split()
        program = words[0] if words else ""
        if not fence and line.startswith("    ") and (program in PYTHON | TRINITY | DVC or program == "make"):
            found.append(no)
    return found


def test_no_page_shows_a_command_in_an_indented_block():
    assert indented_commands("text\n\n    python benchmarks/x.py --y\n\n```bash\n    python ok.py\n```\n") == [3]
    found = [f"{path.relative_to(REPO).as_posix()}:{no}" for path in doc_files()
             for no in indented_commands(path.read_text())]
    assert not found, "fence these commands (```bash) so that they are checked: " + ", ".join(found)
