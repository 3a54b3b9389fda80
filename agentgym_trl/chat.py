"""Multi-turn token ids with the model's own chat template, without ever re-tokenising model output.

A rollout's token stream is ``prompt ids`` followed, turn by turn, by the ids the model sampled and
the ids of the next observation. The sampled ids are kept exactly as generated; only the text the
*template* adds around an observation is tokenised. That text is the difference between the
template's rendering of the conversation before and after the observation is appended, so any HF
chat template works (ChatML, Llama-3, Zephyr, ...), not one hard-coded format.

Templates whose rendering of earlier turns changes once a new message arrives (e.g. ones that drop
the reasoning of past assistant turns) break the prefix property; for them the observation's ids
come from a two-message dummy conversation instead, and ``fallbacks`` counts how often that
happened.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

Message = dict[str, str]


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be used for multi-turn rollouts (the message says why)."""


class ChatEncoder:
    """Token ids for a conversation, built turn by turn from the tokenizer's chat template.

    ``closer_id`` is the token that ends an assistant turn in the template (``<|im_end|>``,
    ``<|eot_id|>``, ``</s>``, ...); generation stops on it, and a turn that stopped on anything else
    (or was cut by a token limit) gets it appended as a non-model token, so the context always reads
    like the template's rendering. ``tail_text`` is what the template writes after the closer
    (``"\\n"`` for ChatML).
    """

    def __init__(
        self,
        tokenizer: Any,
        end_of_turn_ids: Iterable[int] = (),
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                f"the tokenizer {type(tokenizer).__name__} has no chat template; multi-turn rollouts need one "
                "(set tokenizer.chat_template, or use an instruct/chat model)"
            )
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        stop = [i for i in end_of_turn_ids if i is not None]
        if tokenizer.eos_token_id is not None:
            stop.append(tokenizer.eos_token_id)
        self.closer_id, self.closer_text, self.tail_text = self._find_turn_end(set(stop))
        self.stop_ids: tuple[int, ...] = tuple(dict.fromkeys([self.closer_id, *stop]))
        self.fallbacks = 0
        self._warned = False

    # ---- rendering -----------------------------------------------------------------------------
    def render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        """The text of ``messages`` under the chat template, with the run's ``chat_template_kwargs``, so every
        rendering (prompts, observation bridges, checks) uses the arguments training uses.

        Args:
            messages: the conversation so far.
            add_generation_prompt: end with the assistant header (a prompt for the next turn) or not.

        Returns:
            The rendered text (one string, also from tokenizers that return a list).
        """
        text = self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **self.chat_template_kwargs
        )
        if not isinstance(text, str):  # some tokenizers return a list for a single conversation
            text = text[0]
        return text

    def encode(self, text: str) -> list[int]:
        """Tokenise template text; special-token strings in it (``<|im_start|>``) map to their ids."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of a model turn as the env and the next rendering see it (special tokens dropped)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # ---- the two things a rollout needs --------------------------------------------------------
    def start(self, messages: Sequence[Message]) -> tuple[list[int], str]:
        """Ids of the first prompt (ending with the assistant header) and its rendering."""
        text = self.render(messages, add_generation_prompt=True)
        return self.encode(text), text

    def observation_ids(
        self, messages: Sequence[Message], rendered_before: str, observation: str
    ) -> tuple[list[int], str, bool]:
        """Ids to append after the model's last turn so the context ends with a fresh assistant header.

        ``messages`` ends with the assistant turn just played; ``rendered_before`` is the rendering
        (with generation prompt) the model continued from. Returns the ids, the new rendering and
        whether the prefix check held (``False`` = dummy-conversation fallback was used).
        """
        with_reply = self.render(messages, add_generation_prompt=False)
        extended = [*messages, {"role": "user", "content": observation}]
        new = self.render(extended, add_generation_prompt=True)
        reply_part = with_reply[len(rendered_before) :] if with_reply.startswith(rendered_before) else None
        closer_at = reply_part.rfind(self.closer_text) if reply_part is not None else -1
        if closer_at >= 0 and new.startswith(with_reply):
            tail = reply_part[closer_at + len(self.closer_text) :]
            return self.encode(tail + new[len(with_reply) :]), new, True
        self.fallbacks += 1
        if not self._warned:
            self._warned = True
            logger.warning(
                "the chat template re-renders earlier turns differently once a new message is added; observation "
                "tokens come from a dummy conversation instead (counted in ChatEncoder.fallbacks)"
            )
        return self.encode(self.tail_text + self._dummy_delta(observation)), new, False

    # ---- helpers -------------------------------------------------------------------------------
    def _dummy_delta(self, observation: str) -> str:
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        before = self.render(base, add_generation_prompt=False)
        after = self.render([*base, {"role": "user", "content": observation}], add_generation_prompt=True)
        if not after.startswith(before):
            raise ChatTemplateError("the chat template is not prefix-preserving even for a two-message conversation")
        return after[len(before) :]

    def _find_turn_end(self, stop_ids: set[int]) -> tuple[int, str, str]:
        user = [{"role": "user", "content": "ping"}]
        header = self.render(user, add_generation_prompt=True)
        full = self.render([*user, {"role": "assistant", "content": "pong"}], add_generation_prompt=False)
        at = full.find("pong", len(header) if full.startswith(header) else 0)
        if at < 0:
            raise ChatTemplateError("the chat template does not render assistant messages' content")
        after = full[at + len("pong") :]
        ids = self.encode(after)
        special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        special |= set(getattr(self.tokenizer, "added_tokens_decoder", {}) or {})
        if ids and (ids[0] in stop_ids or ids[0] in special):
            closer_id = ids[0]
            closer_text = self.tokenizer.decode([closer_id], skip_special_tokens=False)
            if after.startswith(closer_text):
                if closer_id not in stop_ids:
                    logger.warning(
                        "the chat template ends assistant turns with %r, which is not among the model's eos ids %s; "
                        "generation will also stop on it",
                        closer_text,
                        sorted(stop_ids),
                    )
                return closer_id, closer_text, after[len(closer_text) :]
        raise ChatTemplateError(
            f"the chat template closes an assistant turn with {after!r}, which does not start with an end-of-turn "
            f"token; the model's eos ids are {sorted(stop_ids)}. Use a chat template whose assistant turns end with "
            "the token the model stops on."
        )
