"""Placing a request: which protocol role it is (by its system prompt) and which prepared item it is
about (by the item's prompt inside the user message). A request that cannot be placed is refused with
a reason (the server answers 400), never answered with a made-up reply."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from trinity.tasks.types import TaskItem


class Unplaceable(ValueError):
    """The request names no known role or contains no known item's prompt."""


def _key_line(prompt: str) -> str:
    """The item's longest line: the most distinctive one (a shared preamble is not)."""
    return max((ln.strip() for ln in prompt.splitlines()), key=len, default="")


class ItemIndex:
    """Prepared items by their prompt. Lookup scans the request's lines against each item's longest
    line, then confirms that the whole prompt is in the request."""

    def __init__(self, items: Sequence[TaskItem]):
        self.items = list(items)
        self._by_line: dict[str, list[TaskItem]] = {}
        for it in self.items:
            self._by_line.setdefault(_key_line(it.prompt), []).append(it)

    @classmethod
    def from_prepared(cls, prepared_dir: str | Path) -> ItemIndex:
        from trinity.tasks.prepare import load_items

        items: list[TaskItem] = []
        for path in sorted(Path(prepared_dir).glob("*.parquet")):
            items.extend(load_items(prepared_dir, path.stem))
        return cls(items)

    def find(self, text: str) -> TaskItem:
        found: list[TaskItem] = []
        for line in {ln.strip() for ln in text.splitlines()}:
            for it in self._by_line.get(line, ()):
                if it.prompt.strip() in text:
                    found.append(it)
        if not found:
            raise Unplaceable("no prepared item's prompt is in this request (the simulated pool answers only "
                              f"the prepared items it knows: {len(self.items)} loaded)")
        return max(found, key=lambda it: len(it.prompt))


def find_role(messages: Sequence[Mapping[str, str]], role_prompts: Mapping[str, str]) -> str:
    system = next((m.get("content", "") for m in messages if m.get("role") == "system"), None)
    if system is None:
        raise Unplaceable("the request has no system message; the simulated pool tells roles by the protocol's "
                          "system prompts")
    for role, prompt in role_prompts.items():
        if prompt and system.strip() == str(prompt).strip():
            return role
    raise Unplaceable(f"the system message is none of the protocol's role prompts ({', '.join(role_prompts)})")


def user_text(messages: Sequence[Mapping[str, str]]) -> str:
    return "\n\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
