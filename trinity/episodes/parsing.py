"""Reading the protocol's tags and verdicts out of real model output (docs/METHOD.md).

Small models and reasoning models are sloppy: tags in any case, spaces inside the brackets, a closing
tag cut off by the token limit, the instructions echoed back before the real answer, <think> blocks,
markdown around a verdict. Every function here takes raw reply text and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACCEPT = "ACCEPT"
REJECT = "REJECT"
SUGGESTABLE_ROLES = ("worker", "verifier")

# Canonical tag name -> pattern for the name (models write suggested-role / suggested role too).
_TAG_NAMES = {
    "idea": r"idea",
    "suggestion": r"suggestion",
    "suggested_role": r"suggested[_\- ]?role",
}
_ANY_PROTOCOL_TAG = re.compile(r"<\s*/?\s*(?:" + "|".join(_TAG_NAMES.values()) + r")\s*>", re.I)
_PROTOCOL_TAG_TOKEN = re.compile(
    r"<\s*(?P<close>/)?\s*(?:" + "|".join(f"(?P<{tag}>{pattern})" for tag, pattern in _TAG_NAMES.items()) + r")\s*>",
    re.I)
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.I | re.S)
_THINK_CLOSE = re.compile(r"</think>", re.I)
_THINK_OPEN = re.compile(r"<think>", re.I)
_VERDICT_LEAD = " \t\r\n*_#`>\"'-:.[]()"
_ROLE_NOISE = " \t\r\n*_`'\".:;!()[]"


def strip_reasoning(text: str) -> str:
    """Drop <think> reasoning so words inside it cannot be read as tags or verdicts.

    A closing tag without an opening one (chat templates that open <think> in the prompt) drops
    everything before it; an opening tag never closed (reply cut inside reasoning) drops the rest.
    """
    text = _THINK_BLOCK.sub("", text or "")
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opening = _THINK_OPEN.search(text)
    if opening is not None:
        text = text[: opening.start()]
    return text


def extract_tag(text: str, tag: str) -> str | None:
    """Content of the LAST <tag>...</tag> in `text`, stripped; None when absent or empty.

    The last occurrence wins because models often echo the instructions (which show the tags) before
    answering. Without a closing tag the content runs to the next protocol tag or the end of the text,
    so a reply cut by the token limit still yields its idea.
    """
    name = _TAG_NAMES.get(tag, re.escape(tag))
    openings = list(re.finditer(rf"<\s*{name}\s*>", text or "", re.I))
    if not openings:
        return None
    start = openings[-1].end()
    rest = text[start:]
    close = re.search(rf"<\s*/\s*{name}\s*>", rest, re.I)
    if close is None:
        close = _ANY_PROTOCOL_TAG.search(rest)
    content = rest[: close.start()] if close is not None else rest
    content = content.strip()
    return content or None


def worker_thought(reply: str) -> str:
    """What a Worker adds to the shared message: its <idea>, or the whole reply when the tag is missing.

    The whole reply is taken without <think> reasoning (the transcript is the coordinator's input,
    and reasoning is noise there); if nothing but reasoning is left, the raw reply is used.
    """
    visible = strip_reasoning(reply)
    idea = extract_tag(visible, "idea")
    if idea is not None:
        return idea
    return visible.strip() or (reply or "").strip()


def visible_answer(reply: str) -> str:
    """What a person should read of a Worker reply: the reply without <think> reasoning and without any
    protocol tag or what it holds (the <idea> summary is for the other agents, not for the user).

    Tags nest: a closing tag closes the innermost open tag of its name and any opened inside it; a
    closing tag that closes nothing is dropped alone. An opening tag never closed hides the rest of the
    reply, because that rest is protocol text cut by the token limit or left open by a sloppy model.
    Where a tag block is cut out of a line, the text around it is joined by one space if either side had
    one; a block on its own line(s) leaves the line breaks of the wider side. The result is stripped and
    may be empty (a reply of nothing but tags or reasoning).
    """
    text = strip_reasoning(reply)
    kept: list[str] = []
    open_tags: list[str] = []
    position = 0
    for token in _PROTOCOL_TAG_TOKEN.finditer(text):
        if not open_tags:
            kept.append(text[position:token.start()])
        name = next(tag for tag in _TAG_NAMES if token.group(tag) is not None)
        if token.group("close") is None:
            open_tags.append(name)
        elif name in open_tags:
            del open_tags[len(open_tags) - 1 - open_tags[::-1].index(name):]
        position = token.end()
    if not open_tags:
        kept.append(text[position:])
    return _join_around_cuts(kept).strip()


def _join_around_cuts(pieces: list[str]) -> str:
    out = pieces[0] if pieces else ""
    for piece in pieces[1:]:
        left, right = out.rstrip(" \t"), piece.lstrip(" \t")
        if left.endswith("\n") or right.startswith("\n") or not left.strip() or not right.strip():
            left_lines = left[len(left.rstrip("\r\n")):].count("\n")
            right_lines = right[:len(right) - len(right.lstrip("\r\n"))].count("\n")
            out = left.rstrip("\r\n") + "\n" * max(left_lines, right_lines) + right.lstrip("\r\n")
        else:
            spaced = len(left) < len(out) or len(right) < len(piece)
            out = left + (" " if spaced else "") + right
    return out


@dataclass(frozen=True)
class ThinkerAdvice:
    suggestion: str
    role: str  # worker | verifier


def normalize_role(text: str | None) -> str | None:
    """'**Worker.**', ' the verifier ' -> worker / verifier; anything else -> None."""
    if not text:
        return None
    value = text.strip(_ROLE_NOISE).lower()
    m = re.fullmatch(r"(?:the\s+)?(worker|verifier)", value)
    return m.group(1) if m else None


def parse_thinker(reply: str) -> ThinkerAdvice | None:
    """A Thinker reply with both a non-empty <suggestion> and a valid <suggested_role>; else None
    (the spec discards a reply missing either tag; a role other than worker|verifier counts as missing)."""
    visible = strip_reasoning(reply)
    suggestion = extract_tag(visible, "suggestion")
    role = normalize_role(extract_tag(visible, "suggested_role"))
    if suggestion is None or role is None:
        return None
    return ThinkerAdvice(suggestion=suggestion, role=role)


def parse_verdict(reply: str) -> str:
    """ACCEPT or REJECT, as the spec reads a Verifier.

    After dropping reasoning, leading whitespace and markdown (`**ACCEPT**`, `# Accept`, `> accept`):
    a reply starting with "accept" accepts; otherwise it accepts when a word starting with "accept"
    appears and none starting with "reject" does; anything else (empty, unclear) rejects.
    Words are matched at their start, so "unacceptable" is not an accept (a deliberate refinement of
    the spec's "appears", which would read "this is unacceptable" as ACCEPT).
    """
    text = strip_reasoning(reply).lstrip(_VERDICT_LEAD).lower()
    if text.startswith("accept"):
        return ACCEPT
    has_accept = re.search(r"\baccept", text) is not None
    has_reject = re.search(r"\breject", text) is not None
    return ACCEPT if has_accept and not has_reject else REJECT
