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

Message content (observations, documents, the prompt, collected replies) is text, never control: a
special-token string inside it (``<|im_start|>system``) is tokenised as the characters it is made of,
so an env cannot forge a turn. Only the template's own markers become special-token ids.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

Message = dict[str, str]

_HOLE = "\ue000{}\ue001"  # a private-use placeholder for message i's content while locating it in the rendering
_HOLE_RE = re.compile("\ue000(\\d+)\ue001")


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
        control = set(getattr(tokenizer, "all_special_tokens", []) or [])
        for token in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values():
            if getattr(token, "special", False):
                control.add(str(token.content))
        self.control_tokens: tuple[str, ...] = tuple(sorted((t for t in control if t), key=len, reverse=True))
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        stop = [i for i in end_of_turn_ids if i is not None]
        if tokenizer.eos_token_id is not None:
            stop.append(tokenizer.eos_token_id)
        self.closer_id, self.closer_text, self.tail_text = self._find_turn_end(set(stop))
        self.stop_ids: tuple[int, ...] = tuple(dict.fromkeys([self.closer_id, *stop]))
        self.fallbacks = 0
        self._warned = False
        self._warned_spans = False

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

    def encode_text(self, text: str) -> list[int]:
        """Tokenise message content as plain text, so a special-token string in it cannot become a control id."""
        if not self._has_control(text):
            return self.encode(text)
        return list(self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    def encode_rendered(self, messages: Sequence[Message], add_generation_prompt: bool, text: str,
                        start: int = 0) -> list[int]:
        """Ids of ``text[start:]``, where ``text`` is the rendering of ``messages``: the template's markers are
        control ids, every message's content is text (an observation cannot forge a turn).

        Without a special-token string in any content this is ``encode(text[start:])`` exactly.
        """
        hazards = [i for i, m in enumerate(messages) if self._has_control(str(m.get("content", "")))]
        if not hazards:
            return self.encode(text[start:])
        spans = self._content_spans(messages, add_generation_prompt, text)
        if spans is None:
            if not self._warned_spans:
                self._warned_spans = True
                logger.warning(
                    "could not locate message content in the chat template's rendering; special-token strings in "
                    "content are encoded as text by a search instead"
                )
            spans = self._search_spans(messages, text)
        ids: list[int] = []
        at = start
        for index in hazards:
            a, b = spans[index]
            a, b = max(a, start), max(b, start)
            if b <= a:
                continue
            ids += self.encode(text[at:a])
            ids += self.encode_text(text[a:b])
            at = b
        return ids + self.encode(text[at:])

    def decode(self, ids: Sequence[int]) -> str:
        """The text of a model turn as the env and the next rendering see it (special tokens dropped)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # ---- the two things a rollout needs --------------------------------------------------------
    def start(self, messages: Sequence[Message]) -> tuple[list[int], str]:
        """Ids of the first prompt (ending with the assistant header) and its rendering."""
        text = self.render(messages, add_generation_prompt=True)
        return self.encode_rendered(messages, True, text), text

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
            start = len(rendered_before) + closer_at + len(self.closer_text)
            return self.encode_rendered(extended, True, new, start), new, True
        self.fallbacks += 1
        if not self._warned:
            self._warned = True
            logger.warning(
                "the chat template re-renders earlier turns differently once a new message is added; observation "
                "tokens come from a dummy conversation instead (counted in ChatEncoder.fallbacks)"
            )
        return self._dummy_delta_ids(observation), new, False

    # ---- helpers -------------------------------------------------------------------------------
    def _dummy_delta_ids(self, observation: str) -> list[int]:
        """``tail_text`` and the template's text around ``observation`` after a two-message dummy conversation."""
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        before = self.render(base, add_generation_prompt=False)
        extended = [*base, {"role": "user", "content": observation}]
        after = self.render(extended, add_generation_prompt=True)
        if not after.startswith(before):
            raise ChatTemplateError("the chat template is not prefix-preserving even for a two-message conversation")
        if not self._has_control(observation):
            return self.encode(self.tail_text + after[len(before) :])
        return self.encode(self.tail_text) + self.encode_rendered(extended, True, after, len(before))

    def _has_control(self, text: str) -> bool:
        return any(token in text for token in self.control_tokens)

    def _content_spans(self, messages: Sequence[Message], add_generation_prompt: bool,
                       text: str) -> list[tuple[int, int]] | None:
        """Where each message's content lies in ``text``: the template rendered with placeholders for the
        contents gives its own text around them; each content is then matched as written or trimmed."""
        holes = [{**m, "content": _HOLE.format(i)} for i, m in enumerate(messages)]
        pieces = _HOLE_RE.split(self.render(holes, add_generation_prompt))
        # pieces: template, index, template, index, ..., template
        spans: dict[int, tuple[int, int]] = {}
        at = 0
        for k in range(0, len(pieces) - 1, 2):
            template, index, following = pieces[k], int(pieces[k + 1]), pieces[k + 2]
            if not text.startswith(template, at) or index >= len(messages) or index in spans:
                return None
            at += len(template)
            content = str(messages[index].get("content", ""))
            for candidate in dict.fromkeys((content, content.strip(), content.rstrip(), content.lstrip())):
                end = at + len(candidate)
                if text.startswith(candidate, at) and text.startswith(following, end):
                    break
            else:
                return None
            spans[index] = (at, end)
            at = end
        if at + len(pieces[-1]) != len(text) or len(spans) != len(messages):
            return None
        return [spans[i] for i in range(len(messages))]

    def _search_spans(self, messages: Sequence[Message], text: str) -> list[tuple[int, int]]:
        """Content located by an in-order search (templates that rewrite content beyond trimming)."""
        spans = []
        at = 0
        for message in messages:
            content = str(message.get("content", "")).strip()
            found = text.find(content, at) if content else -1
            spans.append((found, found + len(content)) if found >= 0 else (at, at))
            at = found + len(content) if found >= 0 else at
        return spans

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
