"""Multiple choice: find the letter a reply commits to."""

from __future__ import annotations

import re

LETTERS = "ABCDEFGHIJ"


def extract_choice(reply: str, n_choices: int = 4) -> str:
    """The chosen letter ('' when none is found). Explicit statements beat stray letters."""
    valid = LETTERS[:n_choices]
    text = reply.replace("**", "").replace("__", "")
    cls = f"[{valid}]"
    patterns = [
        rf"answer\s*(?:is|:|=)?\s*(?:option|choice)?\s*[:\-]?\s*[\(\[]?({cls})(?![A-Za-z])",
        rf"\\boxed\{{\s*(?:\\text\{{)?\(?({cls})\)?",
        rf"(?i:option|choice)\s*[\(\[]?({cls})(?![A-Za-z])",
        rf"^\s*[\(\[]?({cls})[\)\].:]?\s*$",
        rf"^\s*[\(\[]?({cls})[\)\].:]\s",
        rf"[\(\[]({cls})[\)\]]",
        rf"(?<![A-Za-z'])({cls})[\).:]?\s*$",
    ]
    for pattern in patterns:
        found: list[str] = re.findall(pattern, text, flags=re.IGNORECASE | re.MULTILINE) \
            if pattern.startswith("answer") else re.findall(pattern, text, flags=re.MULTILINE)
        found = [f.upper() for f in found if f.upper() in valid]
        if found:
            return found[-1]
    return ""


def grade_choice(reply: str, answer: str, n_choices: int = 4) -> float:
    return 1.0 if extract_choice(reply, n_choices) == answer.strip().upper() else 0.0
