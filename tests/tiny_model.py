"""A tiny random Qwen2-style chat model and a byte-level BPE tokenizer, both built in-process (no downloads).

Shared test helper: ``tiny_tokenizer("chatml" | "llama3" | "zephyr")`` trains a small BPE on
built-in text and wraps it in ``PreTrainedTokenizerFast`` with that chat template;
``tiny_model(tokenizer)`` builds a 2-layer, hidden-64 Qwen2 whose end-of-turn token is sampled
with probability ~``stop_prob`` per step, so random turns end on their own after a few tokens
(a freshly initialised model would almost never emit it). ``save_tiny(path)`` writes both for
subprocess runs; load them back with ``PreTrainedTokenizerFast`` (AutoTokenizer swaps the
pre-tokenizer) and ``Qwen2ForCausalLM``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

TEMPLATES = {
    # ChatML (Qwen, SmolLM): <|im_start|>role\ncontent<|im_end|>\n
    "chatml": {
        "template": (
            "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
        ),
        "eos": "<|im_end|>",
        "bos": None,
        "pad": "<|endoftext|>",
        "specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    },
    # Llama-3 style: a BOS, role headers, content trimmed, <|eot_id|> closes a turn with nothing after it
    "llama3": {
        "template": (
            "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
            "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
            "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
        ),
        "eos": "<|eot_id|>",
        "bos": "<|begin_of_text|>",
        "pad": "<|end_of_text|>",
        "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    },
    # Zephyr style: <|user|>\n ... </s>\n<|assistant|>\n ... </s>\n
    "zephyr": {
        "template": (
            "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
        ),
        "eos": "</s>",
        "bos": None,
        "pad": "<pad>",
        "specials": ["<pad>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"],
    },
}

_CORPUS = [
    "Thought: I need the raw materials first.\n\nAction:\nget 4 acacia log",
    "craft 3 acacia wood using 4 acacia log. craft 1 shield using 6 planks, 1 iron ingot.",
    "Crafting commands: Goal: craft. You have crafted the goal. Could not find an item called",
    "inventory: Got 4 oak log. Inventory: [oak planks] (4). Invalid action. Answer in the format",
    "You are playing a Minecraft crafting game. Each episode shows a list of crafting commands.",
    "go to red ball 1 pick up the blue key turn left turn right move forward toggle drop",
    "The quick brown fox jumps over the lazy dog. 0123456789 !?.,:;-_()[]{}<>/\\'\"",
    "tick tock count the turns; the episode ends when the counter reaches its target.",
]


@lru_cache(maxsize=None)
def tiny_tokenizer(template: str = "chatml", vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on a few sentences, with the chosen chat template (cached per template)."""
    spec = TEMPLATES[template]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=spec["specials"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=spec["eos"],
        bos_token=spec["bos"],
        pad_token=spec["pad"],
    )
    fast.chat_template = spec["template"]
    return fast


def tiny_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0, stop_prob: float = 0.15,
               hidden_size: int = 64, num_attention_heads: int = 4) -> Qwen2ForCausalLM:
    """A random 2-layer Qwen2 (hidden 64) whose eos logit makes a turn end after ~1/stop_prob tokens.

    (vLLM's CPU attention needs a head size of 32 or more: ``hidden_size=128, num_attention_heads=2``.)
    """
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    with torch.no_grad():
        # A shared offset in every input embedding gives the final hidden state a stable direction; pointing the
        # eos row of the LM head along it makes eos likely at every position.
        offset = torch.randn(config.hidden_size)
        model.model.embed_tokens.weight += offset / offset.norm()
        probe = torch.randint(0, len(tokenizer), (8, 32))
        hidden = model.model(input_ids=probe).last_hidden_state.reshape(-1, config.hidden_size)
        direction = hidden.mean(0)
        others = model.lm_head(hidden).std().item()
        target = math.log(stop_prob / (1 - stop_prob) * (len(tokenizer) - 1)) + others**2 / 2
        model.lm_head.weight[tokenizer.eos_token_id] = direction * target / direction.dot(direction)
        # Template tokens (<|im_start|>, headers, ...) are never sampled mid-turn, as in a real chat model.
        for token_id in tokenizer.all_special_ids:
            if token_id != tokenizer.eos_token_id:
                model.lm_head.weight[token_id] = -direction * 20 / direction.norm()
    return model


def save_tiny(path: str | Path, template: str = "chatml", seed: int = 0) -> Path:
    """Write a tiny model + tokenizer to ``path`` (for subprocess / multi-process tests)."""
    path = Path(path)
    tokenizer = tiny_tokenizer(template)
    tiny_model(tokenizer, seed=seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def load_tiny(path: str | Path) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    path = Path(path)
    return Qwen2ForCausalLM.from_pretrained(path), PreTrainedTokenizerFast.from_pretrained(path)
