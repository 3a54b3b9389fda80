"""Write the world as an encyclopedia: one article per entity, one passage per article section.

Passages are the retrieval unit (like the 100-word chunks of Search-R1's Wikipedia corpus): each
carries its article's title, and a person's article is split into a lead (birth, origins,
education) and a life-and-work passage (roles, marriage, death), so the facts of one entity
are spread over several documents. ``Encyclopedia`` records which passage states each fact,
which is where a question's supporting documents come from.

``fact_patterns`` turns the same sentence templates into regular expressions, so the scripted
agents in ``agents.py`` can read a fact back from retrieved text without seeing the world.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache

from agentgym_envs.search.data import Document
from agentgym_envs.search.schema import CAREER_PHRASES, FILLERS, RELATIONS, SECTIONS
from agentgym_envs.search.world import Entity, World

_PRONOUNS = {
    "m": {"He": "He", "he": "he", "His": "His", "his": "his", "him": "him", "child": "son"},
    "f": {"He": "She", "he": "she", "His": "Her", "his": "her", "him": "her", "child": "daughter"},
    "": {"He": "It", "he": "it", "His": "Its", "his": "its", "him": "it", "child": "part"},
}
_SLOT = re.compile(r"\{([A-Za-z_]+)(?::(a))?\}")


@dataclass
class Encyclopedia:
    """The passages of every article, and where each fact is stated."""

    world: World
    documents: list[Document]
    #: (entity id, relation key) -> index in ``documents`` of the passage stating it.
    fact_doc: dict[tuple[int, str], int]
    #: entity id -> indices of its article's passages.
    article_docs: dict[int, list[int]]


def with_article(word: str) -> str:
    """``word`` with ``a`` or ``an`` before it (by its first letter)."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def join_items(items: list[str]) -> str:
    """Items as a phrase: ``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _fill(template: str, entity: Entity, world: World) -> str:
    pronouns = _PRONOUNS[entity.gender]

    def slot(match: re.Match) -> str:
        key, article = match.group(1), match.group(2)
        if key == "name":
            return entity.name
        if key in pronouns:
            return pronouns[key]
        text = world.value_text(entity, key)
        return with_article(text) if article else text

    return _SLOT.sub(slot, template)


def _career(entity: Entity, world: World) -> list[str]:
    by_role: dict[tuple[str, str], list[str]] = {}
    for kind, key, other in entity.roles:
        by_role.setdefault((kind, key), []).append(world.entities[other].ref)
    sentences = []
    for role, phrase in CAREER_PHRASES.items():
        items = by_role.get(role)
        if items:
            sentences.append(_fill(phrase.replace("{items}", join_items(items[:4])), entity, world))
    return sentences


def write_encyclopedia(world: World) -> Encyclopedia:
    """Render every entity's article; deterministic for a given world."""
    rng = random.Random(f"agentgym-search-articles-{world.seed}")
    documents: list[Document] = []
    fact_doc: dict[tuple[int, str], int] = {}
    article_docs: dict[int, list[int]] = {}
    for entity in world.entities:
        done: set[str] = set()
        fillers = list(FILLERS[entity.kind])
        rng.shuffle(fillers)
        article_docs[entity.id] = []
        for section, groups in SECTIONS[entity.kind]:
            sentences: list[str] = []
            keys: list[str] = []
            if section == "life and work":
                sentences = _career(entity, world)
            for relations, variants in groups:
                if all(key in entity.facts and key not in done for key in relations):
                    sentences.append(_fill(rng.choice(variants), entity, world))
                    done.update(relations)
                    keys.extend(relations)
            if not sentences:
                continue
            for _ in range(2 if entity.kind == "person" else rng.randint(1, 2)):
                if fillers:
                    sentences.insert(
                        rng.randint(1, len(sentences)) if sentences else 0, _fill(fillers.pop(), entity, world)
                    )
            index = len(documents)
            documents.append(Document(str(index), entity.name, " ".join(sentences)))
            article_docs[entity.id].append(index)
            for key in keys:
                fact_doc[(entity.id, key)] = index
    missing = [
        (e.id, k)
        for e in world.entities
        for k in e.facts
        if (e.id, k) not in fact_doc and RELATIONS[(e.kind, k)].askable
    ]
    if missing:
        raise AssertionError(f"facts with no sentence template: {missing[:5]}")
    return Encyclopedia(world, documents, fact_doc, article_docs)


# ---- reading facts back -----------------------------------------------------------------------


def _template_regex(template: str, kind: str) -> re.Pattern:
    parts = []
    for piece in re.split(r"(\{[A-Za-z_]+(?::a)?\})", template):
        match = _SLOT.fullmatch(piece)
        if match is None:
            parts.append(
                r"\s+".join(re.escape(word) for word in piece.split(" "))
                if piece.strip()
                else (r"\s+" if piece else "")
            )
            continue
        key, article = match.group(1), match.group(2)
        if key == "name":
            parts.append(r"[^.;()]+?")
        elif key in _PRONOUNS["m"]:
            parts.append(r"\w+")
        else:
            target = RELATIONS[(kind, key)].target
            body = {"year": r"\d{3,4}", "number": r"\d[\d,]*"}.get(target, r"[^.;()]+?")
            parts.append((r"an?\s+" if article else "") + f"(?P<{key}>{body})")
    return re.compile("".join(parts))


@lru_cache(maxsize=None)
def fact_patterns(kind: str, key: str) -> tuple[re.Pattern, ...]:
    """Every regular expression that reads ``key`` from a sentence of a ``kind`` article."""
    templates = [
        v for _, groups in SECTIONS[kind] for relations, variants in groups if key in relations for v in variants
    ]
    # most specific first: "was married to {spouse}" must win over "married {spouse}"
    templates.sort(key=lambda t: -len(_SLOT.sub("", t)))
    return tuple(_template_regex(t, kind) for t in templates)


def read_fact(text: str, kind: str, key: str) -> str | None:
    """The value of ``key`` stated in ``text`` (an article passage about a ``kind``), if any."""
    for pattern in fact_patterns(kind, key):
        match = pattern.search(text)
        if match:
            return match.group(key).strip()
    return None
