"""Support for the coordinator tests (no tests here): a tiny random Llama backbone with a byte-level chat tokenizer,
and finite-difference gradients to check the routing head's analytic ones against."""

from __future__ import annotations

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from trinity.coordinator.backbone import Backbone

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.add_special_tokens({"eos_token": "<|im_end|>", "additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_backbone(seed: int = 0, name: str = "tiny-llama") -> Backbone:
    tokenizer = tiny_tokenizer()
    torch.manual_seed(seed)
    # Two query heads sharing one key/value head (grouped-query attention, as SmolLM2 has), each 16 wide: the
    # byte-level tokenizer makes prompts long, attention over them is most of what this backbone costs, and four
    # heads 8 wide took twice the CPU time for the same states (measured on 60 prompts of ~1,700 tokens).
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096, tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    return Backbone(model, tokenizer, name, "test", torch.device("cpu"), torch.float32)


def transcripts(turns: int = 5) -> list[str]:
    """A growing shared message: task, instructions, then one numbered reference thought per turn."""
    text = "Task: what is 17 * 23? Give the number.\n\nSeveral agents collaborate on this task."
    out = [text]
    for t in range(1, turns):
        text += f"\n\n{t}. Reference thought {t}: multiply step by step, " + "carry the tens. " * t
        out.append(text)
    return out


def save_tiny_backbone(folder) -> list[str]:
    """Save the tiny random Llama as a Hugging Face folder; return the overrides that make the coordinator
    load it (`coordinator.backbone.source=hub`). For tests of the pipeline's wiring, where what a hidden
    state says does not matter; the real backbone keeps its own tests (test_coordinator_backbone,
    test_routing_benchmark, test_state_reproducibility, test_serve_local, test_cli_signals)."""
    from pathlib import Path

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        tiny = tiny_backbone()
        tiny.model.save_pretrained(folder)
        tiny.tokenizer.save_pretrained(folder)
    return ["coordinator.backbone.source=hub", f"coordinator.backbone.id={folder}"]


def numeric_grad(fn, w: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of the scalar `fn` at `w`: the check of an analytic gradient."""
    out = np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        up, down = w.copy(), w.copy()
        up[idx] += h
        down[idx] -= h
        out[idx] = (fn(up) - fn(down)) / (2 * h)
    return out
