"""Rewrite the code deps of dvc.yaml's flow stages to exactly the modules each stage imports (found by
the analyser of tests/dvc_analysis.py: module-level and lazy imports, packages on the way, modules named
in strings), so that editing code a stage never runs leaves it up to date in `dvc status`.

    python scripts/dvc_deps.py           # rewrite dvc.yaml in place (data deps and comments kept)
    python scripts/dvc_deps.py --check   # exit 1 and name the stages whose code deps differ
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from dvc_analysis import PACKAGES, _flow_stages, minimal_deps, reachable_files  # noqa: E402


def rewrite(text: str, wanted: dict[str, list[str]]) -> str:
    """dvc.yaml's text with each listed stage's code deps replaced by `wanted[stage]` (after its data deps)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    stage, i = None, 0
    while i < len(lines):
        line = lines[i]
        header = re.match(r"^  ([A-Za-z_][\w-]*):\s*$", line)
        if header:
            stage = header.group(1)
        if line.strip() == "deps:" and stage in wanted:
            out.append(line)
            i += 1
            indent, data = "      ", []
            while i < len(lines) and re.match(r"^\s+- ", lines[i]):
                indent = lines[i][: lines[i].index("-")]
                if lines[i].strip()[2:].split("/")[0] not in PACKAGES:
                    data.append(lines[i])
                i += 1
            out += data + [f"{indent}- {dep}\n" for dep in wanted[stage]]
            continue
        out.append(line)
        i += 1
    return "".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report differences, change nothing")
    args = parser.parse_args()
    wanted = {stage: minimal_deps(ROOT, reachable_files(ROOT, module)) for stage, (module, _) in _flow_stages().items()}
    path = ROOT / "dvc.yaml"
    old = path.read_text()
    new = rewrite(old, wanted)
    if args.check:
        if new != old:
            print("dvc.yaml: code deps differ from the stages' imports; run python scripts/dvc_deps.py",
                  file=sys.stderr)
            return 1
        print("dvc.yaml: every flow stage's code deps are its imports")
        return 0
    if new != old:
        path.write_text(new)
        print(f"dvc.yaml: rewrote the code deps of {', '.join(wanted)}")
    else:
        print("dvc.yaml: already up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
