"""docs/OWN_POOL.md as a user follows it: the blocks the page marks (`<!-- journey: own-pool ... -->`) are written
and run as printed, in page order, in a temporary copy of the project (tests/journey_support.py).

- The pool file, the experiment file and the tasks file are written as the page shows them, into the copy's
  conf/ (named by $TRINITY_CONF_DIR, as the page says) and beside it; the tasks file holds the page's rows
  repeated, each with its own id and a numbered question (a recording of a few items needs more than two).
- The shell blocks run in ONE bash, as one terminal would run them: export the keys, config, plan --record,
  record, record --status, run (the whole pipeline on the replay), then serve, which keeps running.
- The python block (the client) runs against that server once it is healthy.
- `<...>` placeholders are filled from PLACEHOLDERS below and nothing else is added: no override, no other
  variable than the page's own and PREFECT_HOME (README: where the run's Prefect server keeps its database;
  here a migrated copy, to save its start-up migrations). Two loopback OpenAI-compatible servers stand in
  for the two providers; the installation's default coordinator backbone is the tests' tiny random Llama
  (conf/coordinator/smollm2.yaml of the copy), so the stages load it in seconds.

It checks what the page promises: the recording calls both providers, training and evaluation make no pool
call, the report names the recording, serving calls the live pool and answers the client."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from journey_support import (
    REPO,
    SERVE_PORT,
    fill,
    marked_blocks,
    project_copy,
    serve_port,
    stop_group,
    use_backbone,
    user_environment,
)
from pool_stub import StubServer, completion
from process_support import migrated_prefect_home, wait_for

pytestmark = pytest.mark.integration

PAGE = REPO / "docs" / "OWN_POOL.md"
NAME = "mine"
ROWS = 40          # the tasks file: the page's rows, repeated to this many


def _answers(rows: list[dict]) -> dict[str, str]:
    return {row["question"]: row["answer"].rsplit("####", 1)[-1].strip() for row in rows}


def provider(model_id: str, answers: dict[str, str]):
    """A provider's model: the large one answers every task right, the small one the first task only; a
    Verifier accepts a right answer; the large Thinker suggests a Verifier."""
    def handler(body: dict):
        messages = body["messages"]
        system, text = messages[0]["content"], "\n".join(str(m["content"]) for m in messages)
        known = [q for q in answers if q in text]
        right = answers[known[0]] if known else "5"
        if system.startswith("You are the Worker"):
            ok = model_id == "large-1" or (known and known[0] == next(iter(answers)))
            answer = right if ok else str(int(right) + 1)
            return completion(f"The answer is \\boxed{{{answer}}}. <idea>count them</idea>", prompt_tokens=60,
                              completion_tokens=15)
        if system.startswith("You are the Thinker"):
            return completion("<suggestion>check the count</suggestion><suggested_role>verifier</suggested_role>"
                              if model_id == "large-1" else "Looks fine.", prompt_tokens=60, completion_tokens=10)
        return completion("ACCEPT" if f"boxed{{{right}}}" in messages[-1]["content"] else "REJECT: recount",
                          prompt_tokens=80, completion_tokens=2)
    return handler


def test_the_own_pool_guide_runs_as_printed(tmp_path, tiny_backbone_overrides):
    blocks = marked_blocks(PAGE, "own-pool")
    kinds = [(b.kind, b.lang) for b in blocks]
    assert ("file", "yaml") in kinds and ("rows", "json") in kinds and ("run", "bash") in kinds \
        and ("run", "python") in kinds, f"the page marks no complete journey: {kinds}"
    shell = [b for b in blocks if b.kind == "run" and b.lang == "bash"]
    assert "trinity serve" in shell[-1].text, "the last shell block must be the one that serves"

    project = project_copy(tmp_path / "checkout")
    use_backbone(project / "conf", Path(tiny_backbone_overrides[-1].split("=", 1)[1]))
    rows_block = next(b for b in blocks if b.kind == "rows")
    shown = [json.loads(line) for line in rows_block.text.splitlines() if line.strip()]
    rows = [{**row, "id": f"{row['id']}-{i}", "question": f"{row['question']} (#{i})"}
            for i, row in ((i, shown[i % len(shown)]) for i in range(ROWS))]
    answers = _answers(shown)

    with StubServer(provider("large-1", answers)) as large, StubServer(provider("small-1", answers)) as small, \
            serve_port():
        values = {"<name>": NAME, "<large model id>": "large-1", "<large model's base URL>": large.base_url,
                  "<small model id>": "small-1", "<small model's base URL>": small.base_url,
                  "<your key>": "test-key", "<your tasks file>": str(project / "my_tasks.jsonl")}
        for block in blocks:
            if block.kind == "file":
                target = project / fill(block.target, values)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(fill(block.text, values))
            elif block.kind == "rows":
                Path(fill(block.target, values)).write_text("".join(json.dumps(r) + "\n" for r in rows))
        script = "\n".join(fill(b.text, values) for b in shell)
        env = user_environment(TRINITY_CONF_DIR=str(project / "conf"),
                               PREFECT_HOME=str(migrated_prefect_home(tmp_path / "prefect")))
        log = tmp_path / "terminal.log"
        with open(log, "w") as out:
            terminal = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=project, env=env,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_healthy(terminal, log, 600)
            text = log.read_text()
            recorded = sum(int(n) for n in re.findall(r'"new_calls": (\d+)', text))
            assert large.count > 0 and small.count > 0, "the recording called both providers"
            assert large.count + small.count == recorded, \
                "training and evaluation on the replay made no pool call (every call so far is a recorded one)"
            report = (project / "reports" / "report.md").read_text()
            assert f"the recording `data/recordings/{NAME}`" in report, report[:1500]
            assert "serving over its live pool" in text

            printed = io.StringIO()
            for block in (b for b in blocks if b.kind == "run" and b.lang == "python"):
                with contextlib.redirect_stdout(printed):
                    exec(compile(fill(block.text, values), f"{PAGE}:{block.line}", "exec"), {})
            answer, turns = printed.getvalue().strip().splitlines()[-2:]
            assert "5" in answer, printed.getvalue()
            assert "'worker')" in turns, printed.getvalue()
            assert large.count + small.count > recorded, "the served coordinator called the live pool"
        finally:
            stop_group(terminal)


def _wait_healthy(terminal: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Until the served endpoint answers /health, failing with the terminal's output as soon as the commands stop."""
    try:
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{SERVE_PORT}/health", timeout=2).json()["status"] == "ok",
                 timeout_s, "the page's commands to serve", (terminal,))
    except AssertionError as e:
        raise AssertionError(f"{e}:\n{log.read_text()[-6000:]}") from None
