"""Word lists the generated worlds draw names from (people, places, titles, organisations).

The lists themselves are data (``names.json``); this module gives them their Python shapes.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

with resources.files(__package__).joinpath("names.json").open("r", encoding="utf-8") as _handle:
    _WORDS = json.load(_handle)

#: Word lists the generators split from one string each (lists, as before they became data).
FIRST_NAMES, LAST_NAMES, ADJECTIVES, NOUNS, PLACES = (
    list(_WORDS[key]) for key in ("first_names", "last_names", "adjectives", "nouns", "places")
)
#: (name, country, latitude, longitude, elevation in metres)
CITIES: tuple[tuple[str, str, float, float, int], ...] = tuple(tuple(city) for city in _WORDS["cities"])
COUNTRY_CODES: dict[str, str] = _WORDS["country_codes"]
#: Film and paper vocabularies (tuples: the generators index them by position).
GENRES, STUDIOS, KEYWORDS, METHODS, PAPER_TASKS, PAPER_QUALIFIERS, VENUES, ORGANIZATIONS = (
    tuple(_WORDS[key])
    for key in ("genres", "studios", "keywords", "methods", "paper_tasks", "paper_qualifiers", "venues",
                "organizations")
)


def unique_names(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` distinct 'First Last' names in a seeded order."""
    pairs = [(first, last) for first in FIRST_NAMES for last in LAST_NAMES]
    order = rng.permutation(len(pairs))[:count]
    return [f"{pairs[i][0]} {pairs[i][1]}" for i in order]
