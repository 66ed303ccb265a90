"""What the documented-journey tests share (no tests here): reading a page's marked blocks, filling in its
`<...>` placeholders, a temporary copy of the project to run its commands in, and the serve port they share.

A page marks the blocks a user runs or writes with an HTML comment on the line before the fence:

    <!-- journey: own-pool -->                               a shell block run as printed (or, for a python
                                                             block, the client code run against the server)
    <!-- journey: own-pool file=conf/pool/<name>.yaml -->    a file the user writes, exactly this text
    <!-- journey: own-pool rows=<your tasks file> -->        rows of a JSONL file: the test repeats them

`<...>` in a marked block is a placeholder; a test fills each one from its own table (`fill`) and fails on
one it does not know, so a page cannot grow a blank the test skips.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SERVE_PORT = 8700          # conf/serve/default.yaml's serve.port: the port the pages' commands and clients use
PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\n]*?>")
MARKER = re.compile(r"^<!--\s*journey:\s*(?P<journey>[\w-]+)(?:\s+(?P<kind>file|rows)=(?P<target>.+?))?\s*-->$")


@dataclass(frozen=True)
class Block:
    journey: str
    kind: str            # run (a shell block run as printed; python: client code) | file | rows
    target: str | None   # file / rows: the path the block is written to (placeholders unfilled)
    lang: str
    text: str
    line: int            # where the fence opens


def fenced_blocks(text: str) -> list[tuple[int, str, str, str]]:
    """Every fenced block: (line of the fence, the line before it, info string, body)."""
    out, lines = [], text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, lang = i, lines[i][3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((start + 1, lines[start - 1].strip() if start else "", lang, "\n".join(lines[i + 1:j]) + "\n"))
            i = j + 1
        else:
            i += 1
    return out


def marked_blocks(path: Path, journey: str) -> list[Block]:
    """The blocks of `path` marked for `journey`, in page order."""
    out = []
    for line, before, lang, body in fenced_blocks(path.read_text()):
        m = MARKER.match(before)
        if m and m.group("journey") == journey:
            out.append(Block(journey, m.group("kind") or "run", m.group("target"), lang, body, line))
    return out


def section_blocks(path: Path, heading: str) -> list[tuple[str, str]]:
    """(info string, body) of the fenced blocks under the markdown heading `heading`, up to the next heading of
    that level or above."""
    text = path.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    end = re.search(rf"\n#{{1,{len(level)}}} ", text[start + 1:])
    part = text[start: start + 1 + end.start()] if end else text[start:]
    return [(lang, body) for _, _, lang, body in fenced_blocks(part)]


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def fill(text: str, values: dict[str, str]) -> str:
    """`text` with every `<...>` replaced from `values`; an unknown placeholder fails."""
    unknown = placeholders(text) - set(values)
    assert not unknown, f"placeholders the test does not fill: {sorted(unknown)} (add them to its table)"
    return PLACEHOLDER.sub(lambda m: values[m.group(0)], text)


def project_copy(root: Path) -> Path:
    """What a checkout holds for the pages' commands, in `root`: the code and conf/ (dvc.yaml's deps and the
    stages' commands), dvc.yaml, the Makefile with the files its set-up step checks, `.venv` (a link to this
    one) and a DVC repository (`make setup` runs `dvc init` in a git checkout; here without git)."""
    root.mkdir(parents=True, exist_ok=True)
    for folder in ("flows", "trinity", "conf"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "Makefile", "pyproject.toml", "requirements/offline-assets.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    (root / ".venv").symlink_to(BIN.parent)
    # `make setup` reinstalls when pyproject.toml is newer than the venv's stamps: never from a copy
    for name, stamp in (("pyproject.toml", ".deps-installed"),
                        ("requirements/offline-assets.txt", ".assets-installed")):
        if (BIN.parent / stamp).exists():
            before = (BIN.parent / stamp).stat().st_mtime - 60
            os.utime(root / name, (before, before))
    subprocess.run([str(BIN / "dvc"), "init", "--no-scm", "-q"], cwd=root, check=True, timeout=300)
    return root


def use_backbone(conf: Path, folder: Path) -> None:
    """Point the installation's default coordinator (conf/coordinator/smollm2.yaml of a copy) at the Hugging Face
    folder `folder` (the tests' tiny random Llama): the commands stay as printed, the backbone is what the
    integration tests may load in seconds."""
    from omegaconf import OmegaConf

    path = conf / "coordinator" / "smollm2.yaml"
    section = OmegaConf.load(path)
    section.backbone.source, section.backbone.id = "hub", str(folder)
    OmegaConf.save(section, path)


def user_environment(**extra: str) -> dict[str, str]:
    """This environment without what would change the commands behind the pages' backs: make variables a
    Makefile reads from the environment, a Prefect server of the caller's, a serving token."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("EXPERIMENT", "OVERRIDES", "COORDINATOR", "PREFECT_API_URL", "TRINITY_SERVE_TOKEN", "MAKEFLAGS",
                        "MFLAGS", "MAKELEVEL")}
    env.update(extra)
    return env


@contextmanager
def serve_port() -> Iterator[int]:
    """Hold SERVE_PORT for one test at a time (the pages' clients name it; xdist workers and other checkouts on
    the machine may run these tests at once), failing clearly when something else listens there."""
    from filelock import FileLock

    from trinity.pool.servers import port_in_use

    with FileLock(str(Path(tempfile.gettempdir()) / f"trinity-journey-port-{SERVE_PORT}.lock")):
        assert not port_in_use("127.0.0.1", SERVE_PORT), (
            f"port {SERVE_PORT} is in use: the documented commands serve there; stop what listens on it")
        yield SERVE_PORT


def stop_group(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """SIGTERM to the process group `proc` leads (a shell and what it started), SIGKILL after `timeout_s`."""
    import signal

    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
