"""What the fictional encyclopedia is made of: entity kinds, their relations, and how both are worded.

One table drives three things, so they can never drift apart:

* the prose of the articles (``SECTIONS``: sentence templates per kind and section, read from ``phrases.json``),
* the questions (``RELATIONS``, read from ``relations.json``: how a fact is asked, nested into a multi-hop question,
given as a
  trivia clue, or searched for),
* the reading of retrieved text by the scripted agents (regular expressions compiled from the
  same sentence templates, see ``articles.fact_patterns``).

Templates use ``{slot}`` placeholders: a relation key of the article's entity (``{birthplace}``),
``{slot:a}`` for the value with its indefinite article ("an explorer"), ``{name}`` for the
entity, and the pronoun slots ``{He} {he} {His} {his} {him} {child}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

VALUE_TARGETS = ("year", "number", "text")


@dataclass(frozen=True)
class Kind:
    """An entity kind; ``article`` kinds are written "the Orvel River" in running text."""

    name: str
    noun: str
    article: bool = False


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("country", "country"),
        Kind("city", "city"),
        Kind("river", "river", article=True),
        Kind("mountain", "mountain"),
        Kind("person", "person"),
        Kind("university", "university"),
        Kind("company", "company"),
        Kind("band", "band"),
        Kind("club", "football club"),
        Kind("novel", "novel"),
        Kind("film", "film"),
        Kind("album", "album"),
        Kind("painting", "painting"),
        Kind("battle", "battle", article=True),
        Kind("festival", "festival", article=True),
        Kind("expedition", "expedition", article=True),
        Kind("treaty", "treaty", article=True),
    )
}


@dataclass(frozen=True)
class Relation:
    """One functional fact ``kind.key -> target``.

    ``ask`` is the direct question, ``np`` the noun phrase a multi-hop question nests
    ("the birthplace of {x}"), ``clause`` a relative-clause variant of it (Bamboogle style),
    ``popqa`` the PopQA relation template, ``clue`` a predicate for trivia clues ("was born in {v}"), and
    ``keyword`` the words a searcher adds to the entity name to find this fact.
    """

    kind: str
    key: str
    target: str
    ask: str
    keyword: str
    np: str = ""
    clause: str = ""
    popqa: str = ""
    clue: str = ""
    unit: tuple[str, ...] = ()
    askable: bool = True

    @property
    def is_entity(self) -> bool:
        """Whether the fact points to another entity (not a year, number or text value)."""
        return self.target not in VALUE_TARGETS

    @property
    def is_numeric(self) -> bool:
        """Whether the fact is a year or a number (comparable by size)."""
        return self.target in ("year", "number")


def package_data(name: str) -> Any:
    """A JSON file of this package: the tables that are data, not code (relations, phrase tables)."""
    with resources.files(__package__).joinpath(name).open("r", encoding="utf-8") as handle:
        return json.load(handle)


def _relations() -> dict[tuple[str, str], Relation]:
    """The relation table, ``relations.json`` (data: one row per fact, grouped by kind); a treaty's two
    parties are mentioned in the prose but never asked, so they are not askable."""
    rows = package_data("relations.json")
    relations = [Relation(**{**row, "unit": tuple(row.get("unit", ()))}) for row in rows]
    return {(r.kind, r.key): r for r in relations}


RELATIONS: dict[tuple[str, str], Relation] = _relations()


def relation(kind: str, key: str) -> Relation:
    """The relation ``key`` of entity kind ``kind``."""
    return RELATIONS[(kind, key)]


def relations_of(kind: str) -> list[Relation]:
    """Every relation of entity kind ``kind``."""
    return [r for (k, _), r in RELATIONS.items() if k == kind]


# ---- occupations ------------------------------------------------------------------------------

#: Every occupation with the answers accepted for it.
OCCUPATIONS: dict[str, tuple[str, ...]] = {
    "novelist": ("novelist", "writer", "author"),
    "poet": ("poet", "writer"),
    "film director": ("film director", "director", "filmmaker"),
    "actor": ("actor", "actress"),
    "composer": ("composer", "musician"),
    "painter": ("painter", "artist"),
    "singer": ("singer", "vocalist", "musician"),
    "record producer": ("record producer", "producer", "music producer"),
    "general": ("general", "military officer", "soldier"),
    "explorer": ("explorer",),
    "mountaineer": ("mountaineer", "climber"),
    "politician": ("politician",),
    "industrialist": ("industrialist", "businessman", "businessperson", "entrepreneur"),
    "business executive": ("business executive", "executive", "businessperson"),
    "merchant": ("merchant", "trader"),
    "scholar": ("scholar", "academic"),
    "football coach": ("football coach", "coach", "football manager"),
    "architect": ("architect",),
    "physician": ("physician", "doctor"),
    "astronomer": ("astronomer", "scientist"),
    "chemist": ("chemist", "scientist"),
    "jurist": ("jurist", "judge", "lawyer"),
    "sculptor": ("sculptor", "artist"),
    "historian": ("historian",),
    "mathematician": ("mathematician",),
    "engineer": ("engineer",),
    "philosopher": ("philosopher",),
    "diplomat": ("diplomat",),
    "journalist": ("journalist", "writer"),
}

#: Occupations a person gets from no particular role.
FREE_OCCUPATIONS = (
    "architect", "physician", "astronomer", "chemist", "jurist", "sculptor", "historian",
    "mathematician", "engineer", "philosopher", "diplomat", "journalist", "poet", "merchant", "scholar",
)

GENRES = ("folk rock", "jazz", "synth pop", "heavy metal", "chamber pop", "blues", "post-punk", "soul", "bluegrass",
          "electronic")
INDUSTRY_NAMES: dict[str, tuple[str, ...]] = {
    "publishing": ("Press", "Publishing House", "Books"),
    "film": ("Pictures", "Film Studios", "Motion Pictures"),
    "music": ("Records", "Recordings", "Music"),
    "shipping": ("Shipping Company", "Lines", "Maritime"),
    "railway": ("Railway Company", "Rail"),
    "textile": ("Mills", "Textiles", "Weaving Company"),
    "brewing": ("Brewery", "Breweries"),
    "banking": ("Bank", "Savings Bank", "Trust"),
    "steel": ("Steelworks", "Iron and Steel"),
    "pharmaceutical": ("Pharmaceuticals", "Laboratories"),
    "software": ("Software", "Systems", "Labs"),
    "automobile": ("Motors", "Motor Works", "Automobiles"),
    "aviation": ("Aircraft", "Aviation", "Aeroworks"),
}
#: First year each industry can exist in.
INDUSTRY_SINCE = {"software": 1970, "automobile": 1890, "aviation": 1910, "film": 1895, "music": 1900,
                  "pharmaceutical": 1850, "railway": 1830}
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
          "December")


# ---- article templates ------------------------------------------------------------------------

#: A group renders when all its relations are known and not yet written; the first such group
#: of a section wins for each relation. Variants are alternative wordings.
Group = tuple[tuple[str, ...], tuple[str, ...]]

#: The phrase tables (article sections, fillers, career phrases; the question wordings are read by
#: ``questions``) are data: ``phrases.json``.
PHRASES: dict[str, Any] = package_data("phrases.json")

SECTIONS: dict[str, list[tuple[str, list[Group]]]] = {
    kind: [(name, [(tuple(keys), tuple(variants)) for keys, variants in groups]) for name, groups in sections]
    for kind, sections in PHRASES["sections"].items()
}

#: Sentences that carry no fact, so passages read like prose and retrieval has noise to beat.
FILLERS: dict[str, tuple[str, ...]] = {kind: tuple(lines) for kind, lines in PHRASES["fillers"].items()}

#: Inverse mentions in a person's career section: the role this person plays for another entity.
CAREER_PHRASES: dict[tuple[str, str], str] = {(kind, role): phrase for kind, role, phrase in PHRASES["career_phrases"]}
