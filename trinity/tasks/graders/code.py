"""Code grading: pull the program out of a reply, run it with its tests in the sandbox."""

from __future__ import annotations

import re

from trinity.tasks.graders.sandbox import SandboxLimits, SandboxResult, run_python

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(reply: str) -> str:
    """The last ```python block; else the last fenced block of any language; else the whole reply."""
    blocks = _FENCE.findall(reply)
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    if python:
        return python[-1].strip("\n")
    untagged = [body for lang, body in blocks if not lang]
    if untagged:
        return untagged[-1].strip("\n")
    return reply.strip("\n")


def grade_program(program: str, limits: SandboxLimits = SandboxLimits(), stdin: str | None = None
                  ) -> tuple[float, SandboxResult]:
    """1.0 when the composed program (candidate + tests) exits 0 within the limits, else 0.0."""
    result = run_python(program, limits=limits, stdin=stdin)
    return (1.0 if result.ok else 0.0), result
