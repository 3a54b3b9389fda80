"""What the fictional encyclopedia is made of: entity kinds, their relations, and how both are worded.

One table drives three things, so they can never drift apart:

* the prose of the articles (``SECTIONS``: sentence templates per kind and section),
* the questions (``RELATIONS``, read from ``relations.json``: how a fact is asked, nested into a multi-hop question, given as a
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
        return self.target not in VALUE_TARGETS

    @property
    def is_numeric(self) -> bool:
        return self.target in ("year", "number")


def _relations() -> dict[tuple[str, str], Relation]:
    """The relation table, ``relations.json`` (data: one row per fact, grouped by kind); a treaty's two
    parties are mentioned in the prose but never asked, so they are not askable."""
    with resources.files(__package__).joinpath("relations.json").open("r", encoding="utf-8") as handle:
        rows = json.load(handle)
    relations = [Relation(**{**row, "unit": tuple(row.get("unit", ()))}) for row in rows]
    return {(r.kind, r.key): r for r in relations}


RELATIONS: dict[tuple[str, str], Relation] = _relations()


def relation(kind: str, key: str) -> Relation:
    return RELATIONS[(kind, key)]


def relations_of(kind: str) -> list[Relation]:
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

GENRES = ("folk rock", "jazz", "synth pop", "heavy metal", "chamber pop", "blues", "post-punk", "soul", "bluegrass", "electronic")
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
INDUSTRY_SINCE = {"software": 1970, "automobile": 1890, "aviation": 1910, "film": 1895, "music": 1900, "pharmaceutical": 1850, "railway": 1830}
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December")


# ---- article templates ------------------------------------------------------------------------

#: A group renders when all its relations are known and not yet written; the first such group
#: of a section wins for each relation. Variants are alternative wordings.
Group = tuple[tuple[str, ...], tuple[str, ...]]

SECTIONS: dict[str, list[tuple[str, list[Group]]]] = {
    "country": [
        ("lead", [
            (("continent",), ("{name} is a country on the continent of {continent}.", "{name} is a sovereign state on the continent of {continent}.")),
            (("capital",), ("Its capital and largest city is {capital}.", "The capital of {name} is {capital}.")),
            (("language", "currency"), ("The official language of {name} is {language}, and its currency is the {currency}.",)),
            (("established",), ("{name} became an independent state in {established}.", "The country has been an independent state since {established}.")),
        ]),
    ],
    "city": [
        ("lead", [
            (("country",), ("{name} is a city in {country}.", "{name} is a city located in {country}.")),
            (("founded", "founder"), ("{name} was founded in {founded} by {founder}.", "The city was founded in {founded} by {founder}.")),
            (("founded",), ("{name} was founded in {founded}.", "The settlement dates back to {founded}, when it was founded.")),
            (("population",), ("The city has a population of {population}.", "{name} is home to a population of {population}.")),
        ]),
        ("geography and government", [
            (("river",), ("The {river} flows through the city.", "{name} lies on the banks of the {river}.")),
            (("mayor",), ("The current mayor of {name} is {mayor}.", "Since the last election the city has been governed by mayor {mayor}.")),
        ]),
    ],
    "river": [
        ("lead", [
            (("country",), ("The {name} is a river in {country}.", "The {name} is a river flowing through {country}.")),
            (("source", "mouth"), ("It rises on {source} and flows into the {mouth}.",)),
            (("source",), ("It rises on {source}.",)),
            (("mouth",), ("It flows into the {mouth}.",)),
            (("length",), ("The river is {length} kilometres long.", "The {name} is {length} kilometres long.")),
        ]),
    ],
    "mountain": [
        ("lead", [
            (("country", "height"), ("{name} is a mountain in {country}, rising to {height} metres.", "{name} is a peak in {country} with a height of {height} metres.")),
            (("first_ascent", "ascent_year"), ("It was first climbed in {ascent_year} by {first_ascent}.", "The summit was first reached in {ascent_year} by {first_ascent}.")),
        ]),
    ],
    "person": [
        ("lead", [
            (("birth_year", "death_year", "occupation", "nationality"), (
                "{name} ({birth_year}–{death_year}) was {occupation:a} from {nationality}.",
                "{name} was {occupation:a} from {nationality} who lived from {birth_year} to {death_year}.",
            )),
            (("birth_year", "occupation", "nationality"), ("{name} (born {birth_year}) is {occupation:a} from {nationality}.",)),
            (("birthplace",), ("{name} was born in {birthplace}.", "{He} was born in the city of {birthplace}.", "{He} grew up in {birthplace}, where {he} was born.")),
            (("father", "mother"), ("{He} was the {child} of {father} and {mother}.", "{His} parents were {father} and {mother}.")),
            (("father",), ("{His} father was {father}.",)),
            (("mother",), ("{His} mother was {mother}.",)),
            (("alma_mater",), ("{He} studied at {alma_mater}.", "{He} was educated at {alma_mater}.")),
        ]),
        ("life and work", [
            (("spouse",), ("{He} married {spouse}.", "{name} was married to {spouse}.")),
            (("death_place",), ("{He} died in {death_place}.", "{He} spent {his} last years in {death_place}, where {he} died.")),
        ]),
    ],
    "university": [
        ("lead", [
            (("city",), ("{name} is a university in {city}.", "{name} is a public university located in {city}.")),
            (("founded", "founder"), ("It was founded in {founded} by {founder}.", "The university was founded in {founded} by {founder}.")),
            (("founded",), ("It was founded in {founded}.",)),
        ]),
    ],
    "company": [
        ("lead", [
            (("industry", "headquarters"), ("{name} is {industry:a} company headquartered in {headquarters}.", "{name} is {industry:a} firm headquartered in {headquarters}.")),
            (("founded", "founder"), ("The company was founded in {founded} by {founder}.", "It was founded in {founded} by {founder}.")),
            (("ceo",), ("Its chief executive is {ceo}.", "The company is run by chief executive {ceo}.")),
        ]),
    ],
    "band": [
        ("lead", [
            (("genre", "origin", "formed"), ("{name} is {genre:a} band formed in {origin} in {formed}.", "{name} is {genre:a} group, formed in {origin} in {formed}.")),
            (("lead_singer",), ("The band's lead singer is {lead_singer}.", "Its lead singer is {lead_singer}.")),
        ]),
    ],
    "club": [
        ("lead", [
            (("city", "founded"), ("{name} is a football club based in {city}, founded in {founded}.",)),
            (("stadium",), ("The club plays its home matches at {stadium}.",)),
            (("coach",), ("Its head coach is {coach}.", "The team's head coach is {coach}.")),
        ]),
    ],
    "novel": [
        ("lead", [
            (("author", "published"), ("{name} is a novel by {author}, first published in {published}.", "{name} is a novel written by {author} and first published in {published}.")),
            (("language", "publisher"), ("It was written in {language} and published by {publisher}.",)),
            (("language",), ("It was written in {language}.",)),
        ]),
    ],
    "film": [
        ("lead", [
            (("released", "director"), ("{name} is a {released} film directed by {director}.", "{name} is a film released in {released} and directed by {director}.")),
            (("star",), ("It stars {star} in the leading role.", "The film stars {star} in the leading role.")),
            (("studio",), ("The film was produced by {studio}.", "It was produced by {studio}.")),
            (("composer",), ("Its score was composed by {composer}.", "The score was composed by {composer}.")),
        ]),
    ],
    "album": [
        ("lead", [
            (("artist", "released"), ("{name} is an album by {artist}, released in {released}.", "{name} is a studio album by {artist}, released in {released}.")),
            (("label",), ("It was released on the {label} label.",)),
            (("producer",), ("The album was produced by {producer}.", "It was produced by {producer}.")),
        ]),
    ],
    "painting": [
        ("lead", [
            (("painter", "year"), ("{name} is a painting by {painter}, completed in {year}.", "{name} is an oil painting by {painter}, completed in {year}.")),
            (("museum_city",), ("It hangs in a museum in {museum_city}.", "The painting is displayed in a museum in {museum_city}.")),
        ]),
    ],
    "battle": [
        ("lead", [
            (("location", "year"), ("The {name} was fought near {location} in {year}.",)),
            (("commander",), ("{commander} led the victorious side.", "The victorious side was led by {commander}.")),
        ]),
    ],
    "festival": [
        ("lead", [
            (("city", "month"), ("The {name} is an annual festival held in {city} every {month}.", "The {name} is held in {city} every {month}.")),
            (("first_held", "founder"), ("It was first held in {first_held}, organised by {founder}.",)),
            (("first_held",), ("It was first held in {first_held}.",)),
        ]),
    ],
    "expedition": [
        ("lead", [
            (("destination", "year"), ("The {name} was an expedition to {destination} in {year}.",)),
            (("leader",), ("It was led by {leader}.", "The expedition was led by {leader}.")),
            (("sponsor",), ("The expedition was sponsored by {sponsor}.",)),
        ]),
    ],
    "treaty": [
        ("lead", [
            (("party_a", "party_b", "signed_in", "year"), ("The {name} is a treaty between {party_a} and {party_b}, signed in {signed_in} in {year}.",)),
        ]),
    ],
}

#: Sentences that carry no fact, so passages read like prose and retrieval has noise to beat.
FILLERS: dict[str, tuple[str, ...]] = {
    "country": (
        "Much of its interior is covered by forest and high pasture.",
        "The country is known for its long coastline and its terraced vineyards.",
        "Its parliament meets twice a year in a hall built of pale limestone.",
        "Agriculture, fishing and trade have long shaped its economy.",
        "The national flag shows three horizontal bands of colour.",
    ),
    "city": (
        "Its old quarter is known for narrow lanes and covered markets.",
        "The city is a regional centre of trade, crafts and education.",
        "A stone bridge with seven arches links the two halves of the town.",
        "Several of its churches date from the early years of the settlement.",
        "The surrounding countryside is dotted with orchards and small farms.",
        "The main square hosts a weekly market that draws visitors from nearby villages.",
    ),
    "river": (
        "Its valley is known for willow groves and water meadows.",
        "Barges once carried timber and grain along its lower course.",
        "Several old mills still stand along its banks.",
        "The river freezes over in the coldest winters.",
    ),
    "mountain": (
        "Its upper slopes are covered in snow for most of the year.",
        "The mountain is a popular destination for walkers in summer.",
        "A small chapel stands on a ridge below the summit.",
        "Storms often gather on its northern face.",
    ),
    "person": (
        "{He} is regarded as one of the notable figures of {his} generation.",
        "{His} life has been the subject of several biographies.",
        "Contemporaries described {him} as patient, exacting and quick to laugh.",
        "{His} letters and notebooks are kept in a public archive.",
        "{He} was known for a lifelong love of gardening.",
        "{He} travelled widely and kept detailed diaries of {his} journeys.",
        "{His} family moved several times during {his} childhood.",
        "{He} showed an early interest in books and music.",
        "{His} work was widely discussed during {his} lifetime.",
        "Friends remembered {him} as generous with {his} time.",
        "{He} was an avid reader of history and poetry.",
    ),
    "university": (
        "Its library holds one of the largest collections of manuscripts in the region.",
        "The main building is arranged around a quiet cloistered courtyard.",
        "The university is known for its schools of law and medicine.",
    ),
    "company": (
        "The firm grew rapidly in its first decades.",
        "It employs several thousand people across the region.",
        "Its brand is well known throughout the country.",
    ),
    "band": (
        "The band toured widely in its early years.",
        "Critics praised the group's tight harmonies and restless energy.",
        "Its line-up changed several times over the years.",
    ),
    "club": (
        "The club's supporters are known for their songs and banners.",
        "It has won several regional cups.",
        "The team wears striped shirts at home.",
    ),
    "novel": (
        "The story follows a family over three generations.",
        "Critics praised its vivid portrait of provincial life.",
        "It has been translated into several languages.",
        "The book was a modest success on publication and later became a classic.",
    ),
    "film": (
        "The film was shot largely on location.",
        "Critics praised its photography and its quiet pacing.",
        "It was a commercial success on its release.",
        "The story follows a stranger who arrives in a small harbour town.",
    ),
    "album": (
        "The record was made over several months in a converted farmhouse.",
        "Critics singled out its closing track for praise.",
        "It sold well on release and was later reissued.",
    ),
    "painting": (
        "The canvas shows a quiet landscape in the evening light.",
        "It is admired for its muted colours and careful composition.",
        "The work was restored after damage by damp.",
    ),
    "battle": (
        "Heavy rain turned much of the field to mud.",
        "The engagement lasted from dawn until late afternoon.",
        "It is remembered as a turning point of the war.",
    ),
    "festival": (
        "The programme includes music, street theatre and food stalls.",
        "It draws visitors from across the country.",
        "Local choirs open the festival with a procession.",
    ),
    "expedition": (
        "The party set out with pack animals and several local guides.",
        "Bad weather forced a long halt on the approach.",
        "Its journals were later published as a travel book.",
    ),
    "treaty": (
        "It ended years of disputes along the common border.",
        "The text was drafted in two languages.",
        "It remained in force for several decades.",
    ),
}

#: Inverse mentions in a person's career section: the role this person plays for another entity.
CAREER_PHRASES: dict[tuple[str, str], str] = {
    ("film", "director"): "{He} directed {items}.",
    ("film", "star"): "{He} starred in {items}.",
    ("film", "composer"): "{He} wrote the film scores for {items}.",
    ("novel", "author"): "{His} novels include {items}.",
    ("painting", "painter"): "{His} paintings include {items}.",
    ("album", "producer"): "{He} produced the albums {items}.",
    ("band", "lead_singer"): "{He} sings lead for {items}.",
    ("city", "founder"): "{He} founded the city of {items}.",
    ("university", "founder"): "{He} founded {items}.",
    ("company", "founder"): "{He} founded the firm {items}.",
    ("company", "ceo"): "{He} serves as chief executive of {items}.",
    ("city", "mayor"): "{He} was elected mayor of {items}.",
    ("club", "coach"): "{He} is the head coach of {items}.",
    ("battle", "commander"): "{He} commanded the winning side at {items}.",
    ("festival", "founder"): "{He} started {items}.",
    ("expedition", "leader"): "{He} led {items}.",
    ("mountain", "first_ascent"): "{He} made the first ascent of {items}.",
}
