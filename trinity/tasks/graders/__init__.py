"""Graders: code (sandboxed execution), math (symbolic equivalence), multiple choice, LLM judge."""

from trinity.sandbox import SandboxLimits, SandboxResult, isolation_mode, run_python
from trinity.tasks.graders.choice import extract_choice, grade_choice
from trinity.tasks.graders.code import extract_code, grade_program
from trinity.tasks.graders.judge import JudgeVerdict, judge_score
from trinity.tasks.graders.math_answer import answers_equivalent, extract_math_answer

__all__ = [
    "extract_choice", "grade_choice", "extract_code", "grade_program", "JudgeVerdict", "judge_score",
    "answers_equivalent", "extract_math_answer", "SandboxLimits", "SandboxResult", "isolation_mode", "run_python",
]
