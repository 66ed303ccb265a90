"""docs/benchmarks/ablate_speed/README.md: the figures `benchmarks/ablate_speed.py` wrote (results.json, the exact
fitness walked and vectorised; timeouts.json and workers.json, its `--compare` runs)."""

from __future__ import annotations

from typing import Any

FOLDER = "docs/benchmarks/ablate_speed"


def _missing(file: str, command: str) -> str:
    return f"Not measured yet (`python benchmarks/ablate_speed.py {command}--out {FOLDER}/{file}`).\n"


def _same_bytes(res: dict[str, Any], runs: str) -> str:
    if not res.get("identical_outputs"):
        return f"The {runs} runs did **not** write the same files: see the md5 of every file in the JSON."
    tail = (", and those are the bytes of the clone's own `make run` (the hashes dvc.lock commits)"
            if res.get("same_as_pipeline_outputs") else "")
    return f"The {runs} runs wrote the same {res['files']} files{tail}: no verdict moved."


def vectorised(src: Any) -> str:
    """The exact fitness per call, the walk against the vectorised path, and the whole stage before and after."""
    res = src.json(f"{FOLDER}/results.json")
    if not res:
        return _missing("results.json", "--rounds 2 ")
    calls, stage = res["per_call"], res["stage"]
    before, after = stage["runs"]["before"], stage["runs"]["after"]
    gen, val = calls["generation"], calls["validation"]

    def row(label: str, c: dict[str, Any]) -> str:
        walk, vec = min(c["walk_ms"]), min(c["vectorised_ms"])
        same = "" if c.get("identical") else " (values differ)"
        return f"| {label} | {walk:.1f} ms | {vec:.1f} ms | {walk / vec:.1f}x{same} |"

    def best(runs: list[dict[str, Any]], key: str) -> float:
        return min(r[key] for r in runs)

    lines = [f"Measured on the {res['cpu']}, {res['date']}; best of {len(before)} rounds, the two paths alternating.",
             "", "| work | before (walk) | after (vectorised) | |", "|---|---:|---:|---:|",
             row(f"one generation's exact fitness: {gen['candidates']} candidates x {gen['items']} training items "
                 f"({gen['states']} states)", gen),
             row(f"one validation: {val['candidates']} candidate x {val['items']} validation items "
                 f"({val['states']} states)", val),
             f"| the whole stage (`ablate_stage.run`, {len(stage['variants'])} variants, fresh run folders), CPU of "
             f"its process, best of {len(before)} | {best(before, 'cpu_s'):.1f} s | {best(after, 'cpu_s'):.1f} s | "
             f"{best(before, 'cpu_s') / best(after, 'cpu_s'):.2f}x |",
             "| the same, each round (before, after) | "
             + ", ".join(f"{r['cpu_s']:.1f} s" for r in before) + " | "
             + ", ".join(f"{r['cpu_s']:.1f} s" for r in after) + " | |",
             f"| the same, wall, best of {len(before)} (shared machine) | {best(before, 'wall_s'):.1f} s | "
             f"{best(after, 'wall_s'):.1f} s | |",
             "", _same_bytes(stage, f"{len(before) + len(after)}")]
    return "\n".join(lines) + "\n"


def _compare(src: Any, file: str, columns: tuple[str, str], rows: list[tuple[str, Any]]) -> str:
    res = src.json(f"{FOLDER}/{file}")
    if not res:
        return _missing(file, f"--compare {file.removesuffix('.json')} --rounds 1 ")
    stage = res["stage"]
    before, after = stage["runs"]["before"][0], stage["runs"]["after"][0]
    lines = [f"Measured on the {res['cpu']}, {res['date']}.", "",
             f"| the whole stage, {len(stage['variants'])} variants, fresh run folders | {columns[0]} | {columns[1]} |",
             "|---|---:|---:|"]
    lines += [f"| {label} | {cell(before)} | {cell(after)} |" for label, cell in rows]
    lines += ["", f"Wall ratio {stage['wall_ratio_best']:.2f}x. " + _same_bytes(stage, "two")]
    return "\n".join(lines) + "\n"


def timeouts(src: Any) -> str:
    """`--compare timeouts`: a program that timed out twice is taken to time out, against grading it again."""
    return _compare(src, "timeouts.json", ("before (graded again)", "after (two strikes)"), [
        ("wall", lambda r: f"{r['wall_s']:.1f} s"),
        ("sandbox runs (of them timeouts)", lambda r: f"{r['sandbox_runs']} ({r['sandbox_timeouts']})"),
        ("CPU of the stage's process (the sandboxed programs not included)", lambda r: f"{r['cpu_s']:.1f} s")])


def workers(src: Any) -> str:
    """`--compare workers`: the variants one after the other, against one process per CPU."""
    return _compare(src, "workers.json", ("before (one after the other)", "after (two processes)"), [
        ("wall", lambda r: f"{r['wall_s']:.1f} s"),
        ("CPU of the stage, its processes and the sandbox", lambda r: f"{r['cpu_s']:.1f} s")])


REGIONS = {"ablate-speed": vectorised, "ablate-speed-timeouts": timeouts, "ablate-speed-workers": workers}
