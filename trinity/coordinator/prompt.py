"""Render the coordinator's chat prompt: system names the number of agents, user is the transcript.

The transcript is the shared user message of the turn protocol (task prompt + collaboration
instructions + numbered reference thoughts); the caller passes it as one string.
"""

from __future__ import annotations

from typing import Any


class PromptRenderer:
    """Chat template with the generation prompt added and thinking disabled where the template supports it."""

    def __init__(self, tokenizer: Any, system_template: str, n_agents: int):
        self.tokenizer = tokenizer
        self.system = system_template.format(n_agents=n_agents)
        self.n_agents = n_agents

    def render(self, transcript: str) -> str:
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": transcript}]
        if getattr(self.tokenizer, "chat_template", None):
            # Templates ignore variables they do not use, so enable_thinking is safe for every model.
            text: str = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
            )
            return text
        # Base models without a template: a plain layout that still ends where the reply would begin.
        return f"{self.system}\n\n{transcript}\n\n"

    def token_ids(self, transcript: str) -> list[int]:
        # The template already holds the special tokens (BOS included where the model wants one).
        return list(self.tokenizer(self.render(transcript), add_special_tokens=False)["input_ids"])
