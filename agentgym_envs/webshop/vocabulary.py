"""The product vocabulary the default catalogue is generated from: departments, product types,
their attributes, option values, title words and price ranges.

Each ``ProductType`` reads like a shelf of a real online shop: a search query ("running shoes"),
a category path, title words, the attribute phrases shoppers ask for ("non slip", "memory foam"),
the option dimensions a buyer must choose (color, size, pack, ...) and a plausible price range.
The table itself is data, ``vocabulary.json`` beside this module (option value lists by name,
the product types, brand syllables, review phrases); this module loads it once into the frozen
structures below. Changing anything in it changes the generated catalogue: bump
``GENERATOR_VERSION`` in ``catalogue.py`` when you do, so disk caches are rebuilt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class ProductType:
    """One shelf of the shop: what shoppers search for and what varies between its products."""

    query: str
    department: str
    path: tuple[str, ...]
    heads: tuple[str, ...]
    descriptors: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: tuple[float, float]
    uses: tuple[str, ...]
    audiences: tuple[str, ...] = ()
    option_chance: dict[str, float] = field(default_factory=dict)


def _load() -> dict[str, Any]:
    with resources.files(__package__).joinpath("vocabulary.json").open("r", encoding="utf-8") as handle:
        return json.load(handle)


def _product_type(entry: dict[str, Any], option_values: dict[str, tuple[str, ...]]) -> ProductType:
    """A product type from its JSON entry; an option given as a string names a list of ``option_values``."""
    options = {
        name: option_values[values] if isinstance(values, str) else tuple(values)
        for name, values in entry["options"].items()
    }
    words = ("path", "heads", "descriptors", "attributes", "uses", "audiences")
    lists = {key: tuple(entry.get(key, ())) for key in words}
    return ProductType(entry["query"], entry["department"], options=options, price=tuple(entry["price"]),
                       option_chance=dict(entry.get("option_chance", {})), **lists)


_DATA = _load()
#: Option value lists shared by several product types ("SHOE_SIZES", "PACKS", ...).
OPTION_VALUES: dict[str, tuple[str, ...]] = {name: tuple(values) for name, values in _DATA["option_values"].items()}
PRODUCT_TYPES: tuple[ProductType, ...] = tuple(_product_type(entry, OPTION_VALUES) for entry in _DATA["product_types"])
BRAND_SYLLABLES_START: tuple[str, ...] = tuple(_DATA["brand_syllables_start"])
BRAND_SYLLABLES_END: tuple[str, ...] = tuple(_DATA["brand_syllables_end"])
BRAND_SUFFIXES: tuple[str, ...] = tuple(_DATA["brand_suffixes"])
REVIEW_TITLES_GOOD: tuple[str, ...] = tuple(_DATA["review_titles_good"])
REVIEW_TITLES_MIXED: tuple[str, ...] = tuple(_DATA["review_titles_mixed"])
REVIEW_TITLES_BAD: tuple[str, ...] = tuple(_DATA["review_titles_bad"])
REVIEW_BODIES_GOOD: tuple[str, ...] = tuple(_DATA["review_bodies_good"])
REVIEW_BODIES_MIXED: tuple[str, ...] = tuple(_DATA["review_bodies_mixed"])
REVIEW_BODIES_BAD: tuple[str, ...] = tuple(_DATA["review_bodies_bad"])
del _DATA
