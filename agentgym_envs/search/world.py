"""A fictional world (countries, cities, people, organisations, works, events), deterministic from a seed.

Facts are invented, so an agent cannot answer from memory: it has to search. Every word of every
name is unique in the world (except the surnames a family shares), so a name found in a text
always means its entity, which is what makes the question filters in ``questions.py`` exact.
Timelines are kept plausible (people are alive and adult when they found, write or direct
something; a city exists before anyone is born in it).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from typing import Callable

from agentgym_envs.search.schema import (
    CAREER_PHRASES,
    FILLERS,
    FREE_OCCUPATIONS,
    GENRES,
    INDUSTRY_NAMES,
    INDUSTRY_SINCE,
    KINDS,
    MONTHS,
    SECTIONS,
    relation,
)

#: Bump when the generator changes: it is part of the on-disk cache key.
GENERATOR_VERSION = 2
PRESENT_YEAR = 2024

#: Entity counts at scale 1 (about 3,600 articles, 9,000 passages).
BASE_COUNTS = {
    "country": 14,
    "city": 260,
    "river": 60,
    "mountain": 60,
    "person": 1700,
    "university": 60,
    "company": 180,
    "band": 90,
    "club": 60,
    "novel": 330,
    "film": 260,
    "album": 150,
    "painting": 160,
    "battle": 60,
    "festival": 60,
    "expedition": 50,
    "treaty": 40,
}


@dataclass
class Entity:
    """One article subject. ``facts`` maps relation keys to entity ids or plain values."""

    id: int
    kind: str
    name: str
    facts: dict[str, int | str] = field(default_factory=dict)
    gender: str = ""
    #: (kind, relation, id) of the facts of other entities that point at this one.
    roles: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def ref(self) -> str:
        """How running text refers to the entity ("the Orvel River", "Mount Tessar")."""
        return f"the {self.name}" if KINDS[self.kind].article else self.name


@dataclass
class World:
    seed: int
    entities: list[Entity]

    def of_kind(self, kind: str) -> list[Entity]:
        """The entities of one kind."""
        return [e for e in self.entities if e.kind == kind]

    def target(self, entity: Entity, key: str) -> Entity | None:
        """The entity a fact points at, or ``None`` for value facts and missing facts."""
        if key not in entity.facts or not relation(entity.kind, key).is_entity:
            return None
        return self.entities[int(entity.facts[key])]

    def value_text(self, entity: Entity, key: str) -> str:
        """The fact as written in the articles ("Kestrel", "1843", "48,200", "film director")."""
        rel = relation(entity.kind, key)
        value = entity.facts[key]
        if rel.is_entity:
            return self.entities[int(value)].name
        if rel.target == "number":
            return f"{int(value):,}"
        return str(value)


# ---- names ------------------------------------------------------------------------------------

_ONSETS = (
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "tr",
    "st",
    "th",
    "gr",
    "w",
)
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei", "y")
_CODAS = ("", "", "", "", "", "n", "r", "l", "s", "m", "th", "nd", "rn")
_FEMALE_ENDINGS = ("a", "ia", "ine", "elle", "ys", "ara", "ena", "is")
_MALE_ENDINGS = ("or", "an", "ek", "us", "o", "ir", "as", "en", "ald")
_TITLE_NOUNS = (
    "Lantern",
    "Harbour",
    "Orchard",
    "Winter",
    "Garden",
    "Bridge",
    "Tower",
    "Mirror",
    "Letter",
    "Daughter",
    "Shadow",
    "Song",
    "Road",
    "Promise",
    "Island",
    "Clock",
    "Crown",
    "Feast",
    "Storm",
    "Gate",
    "Widow",
    "Silence",
    "Ferry",
    "Fields",
)
_ADJECTIVES = ("Silver", "Quiet", "Crimson", "Northern", "Hollow", "Golden", "Distant", "Burning", "Pale", "Restless")
_SEASONS = ("Summer", "Winter", "Spring", "Autumn")
#: Common English words that must never be a generated name.
_RESERVED = {
    "the",
    "and",
    "was",
    "born",
    "city",
    "river",
    "mount",
    "from",
    "sea",
    "are",
    "bore",
    "sane",
    "dome",
    "mane",
    "more",
    "sore",
    "tone",
    "bone",
    "lane",
    "mile",
    "tale",
    "vale",
    "pale",
    "dale",
    "hero",
    "zero",
    "data",
    "sofa",
    "drama",
    "manor",
    "tenor",
    "motor",
    "rotor",
    "vapor",
    "sonar",
    "solar",
    "polar",
    "lunar",
    "radar",
    "pasta",
    "salsa",
    "villa",
    "vista",
    "diva",
    "nova",
    "lava",
    "saga",
    "mania",
    "media",
    "mafia",
    "tiara",
    "arena",
}


class NamePool:
    """Invented words, each used once in the world (reserved template words never come out)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set(_RESERVED)
        for text in [t for sections in SECTIONS.values() for _, groups in sections for _, ts in groups for t in ts]:
            self.used.update(w.lower() for w in text.replace("{", " ").replace("}", " ").split())
        for texts in FILLERS.values():
            for text in texts:
                self.used.update(w.strip(".,").lower() for w in text.split())

    def _syllable(self, first: bool) -> str:
        onset = "" if first and self.rng.random() < 0.25 else self.rng.choice(_ONSETS)
        return onset + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)

    def word(self, syllables: tuple[int, ...] = (2, 2, 3), ending: str = "") -> str:
        """A new invented word of so many syllables (pronounceable, 4-10 letters, never used before)."""
        for _ in range(1000):
            count = self.rng.choice(syllables)
            text = "".join(self._syllable(i == 0) for i in range(count))
            if ending:
                text = text.rstrip("aeiouy") + ending
            if not 4 <= len(text) <= 10 or any(text[i] == text[i + 1] == text[i + 2] for i in range(len(text) - 2)):
                continue
            if text.lower() in self.used:
                continue
            self.used.add(text.lower())
            return text.capitalize()
        raise RuntimeError("name space exhausted")

    def given(self, gender: str) -> str:
        """A new given name, its ending chosen by gender."""
        return self.word((1, 2), ending=self.rng.choice(_FEMALE_ENDINGS if gender == "f" else _MALE_ENDINGS))


def demonym(country: str) -> str:
    """The adjective of an invented country's people, by its ending (Velora -> Veloran, Tesk -> Teskian)."""
    if country.endswith("a"):
        return country + "n"
    if country[-1] in "eiou":
        return country + "an"
    if country.endswith("y"):
        return country[:-1] + "ian"
    return country + "ian"


# ---- the generator ----------------------------------------------------------------------------


class _Builder:
    def __init__(self, seed: int, scale: float):
        self.rng = random.Random(f"agentgym-search-world-{seed}")
        self.names = NamePool(self.rng)
        self.scale = scale
        self.entities: list[Entity] = []
        self.persons_by_birth: list[tuple[int, int]] = []  # sorted (birth year, id)
        self.holders: dict[str, list[tuple[int, int]]] = {}  # occupation -> sorted (birth, id)

    def count(self, kind: str) -> int:
        minimum = {"country": 8}.get(kind, 2)
        return max(minimum, round(BASE_COUNTS[kind] * self.scale))

    def new(self, kind: str, name: str, gender: str = "", **facts: int | str) -> Entity:
        entity = Entity(len(self.entities), kind, name, dict(facts), gender)
        self.entities.append(entity)
        return entity

    def of_kind(self, kind: str) -> list[Entity]:
        return [e for e in self.entities if e.kind == kind]

    # -- places ---------------------------------------------------------------------------------
    def places(self) -> None:
        rng = self.rng
        continents = [self.names.word((2, 3)) for _ in range(4)]
        self.seas = [f"{self.names.word()} Sea" for _ in range(6)]
        for _ in range(self.count("country")):
            name = self.names.word((2, 3))
            self.names.used.add(demonym(name).lower())
            self.new(
                "country",
                name,
                continent=rng.choice(continents),
                language=demonym(name),
                currency=self.names.word((2,)).lower(),
                established=rng.randint(1400, 1950),
            )
        countries = self.of_kind("country")
        for _ in range(self.count("city")):
            ancient = rng.random() < 0.4
            founded = rng.randint(600, 1600) if ancient else rng.randint(1680, 1930)
            population = round(int(2.718 ** rng.uniform(7.5, 14.0)), -2) or 100
            self.new(
                "city", self.names.word(), country=rng.choice(countries).id, founded=founded, population=population
            )
        self.cities = sorted(self.of_kind("city"), key=lambda c: (int(c.facts["founded"]), c.id))
        self.city_founded = [int(c.facts["founded"]) for c in self.cities]
        for country in countries:  # the capital is the oldest city of the country
            own = [c for c in self.cities if c.facts["country"] == country.id]
            if own:
                country.facts["capital"] = own[0].id
        for _ in range(self.count("mountain")):
            self.new(
                "mountain",
                f"Mount {self.names.word()}",
                country=rng.choice(countries).id,
                height=rng.randint(800, 6500),
            )
        mountains = self.of_kind("mountain")
        for _ in range(self.count("river")):
            country = rng.choice(countries)
            local = [m for m in mountains if m.facts["country"] == country.id] or mountains
            river = self.new(
                "river",
                f"{self.names.word()} River",
                country=country.id,
                mouth=rng.choice(self.seas),
                length=rng.randint(40, 2500),
            )
            if rng.random() < 0.85:
                river.facts["source"] = rng.choice(local).id
        rivers = self.of_kind("river")
        for city in self.cities:
            local = [r for r in rivers if r.facts["country"] == city.facts["country"]]
            if local and rng.random() < 0.55:
                city.facts["river"] = rng.choice(local).id

    def city_before(self, year: int, country: int | None = None) -> Entity:
        """A random city founded no later than ``year`` (in ``country`` when possible)."""
        upto = bisect.bisect_right(self.city_founded, year)
        pool = self.cities[: max(upto, 1)]
        if country is not None:
            for _ in range(8):
                city = self.rng.choice(pool)
                if city.facts["country"] == country:
                    return city
        return self.rng.choice(pool)

    # -- people ---------------------------------------------------------------------------------
    def person(self, gender: str, birth: int, surname: str, birthplace: Entity) -> Entity:
        rng = self.rng
        facts: dict[str, int | str] = {
            "birth_year": birth,
            "birthplace": birthplace.id,
            "nationality": int(birthplace.facts["country"]),
        }
        lifespan = rng.randint(38, 96)
        if birth + lifespan < PRESENT_YEAR:
            facts["death_year"] = birth + lifespan
            place = (
                birthplace
                if rng.random() < 0.45
                else self.city_before(birth + lifespan, int(birthplace.facts["country"]))
            )
            facts["death_place"] = place.id
        entity = self.new("person", f"{self.names.given(gender)} {surname}", gender, **facts)
        bisect.insort(self.persons_by_birth, (birth, entity.id))
        return entity

    def people(self) -> None:
        rng = self.rng
        target = self.count("person")
        couples: list[tuple[Entity, Entity]] = []
        while len(self.persons_by_birth) < target:
            if not couples:
                birth = rng.randint(1650, 1965)
                home = self.city_before(birth)
                husband = self.person("m", birth, self.names.word((2, 3)), home)
                wife = self.person(
                    "f",
                    birth + rng.randint(-6, 6),
                    self.names.word((2, 3)),
                    self.city_before(birth, int(home.facts["country"])),
                )
                couples.append((husband, wife))
                continue
            father, mother = couples.pop(0)
            father.facts["spouse"], mother.facts["spouse"] = mother.id, father.id
            start = max(int(father.facts["birth_year"]), int(mother.facts["birth_year"]))
            for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4))):
                birth = start + rng.randint(20, 38)
                if birth > 2003 or len(self.persons_by_birth) >= target:
                    break
                gender = rng.choice("mf")
                home = self.entities[int(father.facts["birthplace"])]
                if int(home.facts["founded"]) > birth or rng.random() < 0.4:
                    home = self.city_before(birth, int(home.facts["country"]))
                child = self.person(gender, birth, father.name.split(" ", 1)[1], home)
                child.facts["father"], child.facts["mother"] = father.id, mother.id
                if birth < 1990 and rng.random() < 0.7:
                    other = "f" if gender == "m" else "m"
                    spouse_home = self.city_before(birth, int(home.facts["country"]))
                    spouse = self.person(other, birth + rng.randint(-5, 5), self.names.word((2, 3)), spouse_home)
                    couples.append((child, spouse) if gender == "m" else (spouse, child))

    def pick_person(
        self,
        occupations: tuple[str, ...],
        born: tuple[int, int],
        alive_in: int | None = None,
        living: bool = False,
        reuse: float = 0.35,
        accept: Callable[[Entity], bool] | None = None,
    ) -> Entity | None:
        """A person born in ``born`` whose occupation is unset or one of ``occupations``.

        ``alive_in``: alive in that year; ``living``: alive today. With probability ``reuse`` an
        existing holder of the occupation is preferred, so some people become prolific.
        """
        rng = self.rng

        def ok(person: Entity) -> bool:
            occupation = person.facts.get("occupation")
            if occupation is not None and occupation not in occupations:
                return False
            death = person.facts.get("death_year")
            if living and death is not None:
                return False
            if alive_in is not None and death is not None and int(death) < alive_in:
                return False
            return accept is None or accept(person)

        pools = []
        if rng.random() < reuse:
            for occupation in occupations:
                pools.append(self.holders.get(occupation, []))
        pools.append(self.persons_by_birth)
        for pool in pools:
            lo = bisect.bisect_left(pool, (born[0], -1))
            hi = bisect.bisect_right(pool, (born[1], len(self.entities)))
            if hi <= lo:
                continue
            for _ in range(40):
                person = self.entities[pool[rng.randrange(lo, hi)][1]]
                if ok(person):
                    self.assign(person, occupations)
                    return person
        return None

    def assign(self, person: Entity, occupations: tuple[str, ...]) -> None:
        if "occupation" not in person.facts:
            occupation = self.rng.choice(occupations)
            person.facts["occupation"] = occupation
            bisect.insort(self.holders.setdefault(occupation, []), (int(person.facts["birth_year"]), person.id))

    def role(self, entity: Entity, key: str, person: Entity | None) -> None:
        if person is not None:
            entity.facts[key] = person.id

    # -- organisations, works, events -------------------------------------------------------------
    def organisations(self) -> None:
        """Cities' founders and mayors, universities (and who studied where), companies, bands and clubs,
        in this order (the order of the draws)."""
        self._city_roles()
        self._universities()
        self._alma_maters()
        self._companies()
        self._bands()
        self._clubs()

    def _city_roles(self) -> None:
        """A founder for the younger cities, a living mayor for half of the large ones."""
        rng = self.rng
        for city in self.cities:
            founded = int(city.facts["founded"])
            if founded >= 1680:
                self.role(
                    city,
                    "founder",
                    self.pick_person(
                        ("merchant", "explorer", "general", "politician"),
                        (founded - 60, founded - 25),
                        alive_in=founded,
                    ),
                )
            if int(city.facts["population"]) > 20_000 and rng.random() < 0.5:
                self.role(city, "mayor", self.pick_person(("politician",), (1950, 1985), living=True, reuse=0.0))

    def _universities(self) -> None:
        """Universities, some named after their city, most with a founder."""
        rng = self.rng
        named_after_city: set[int] = set()
        for _ in range(self.count("university")):
            founded = rng.randint(1450, 1960)
            city = self.city_before(founded)
            if city.id not in named_after_city and rng.random() < 0.5:
                named_after_city.add(city.id)
                name = f"University of {city.name}"
            else:
                kinds = ("College", "Academy", "Institute of Technology" if founded > 1850 else "College")
                name = f"{self.names.word()} {rng.choice(kinds)}"
            university = self.new("university", name, city=city.id, founded=founded)
            if rng.random() < 0.7:
                self.role(
                    university,
                    "founder",
                    self.pick_person(
                        ("scholar", "physician", "jurist", "philosopher", "politician", "merchant"),
                        (founded - 70, founded - 25),
                        alive_in=founded,
                    ),
                )

    def _alma_maters(self) -> None:
        """Where people studied: a university open when they were 18, mostly in their own country."""
        rng = self.rng
        universities = sorted(self.of_kind("university"), key=lambda u: (int(u.facts["founded"]), u.id))
        opened = [int(u.facts["founded"]) for u in universities]
        for person in [self.entities[i] for _, i in self.persons_by_birth]:
            if rng.random() < 0.55:
                open_ = universities[: bisect.bisect_right(opened, int(person.facts["birth_year"]) + 18)]
                if open_:
                    choice = rng.choice(open_)
                    if rng.random() < 0.7:  # most people study in their own country
                        for _ in range(8):
                            if self.entities[int(choice.facts["city"])].facts["country"] == person.facts["nationality"]:
                                break
                            choice = rng.choice(open_)
                    person.facts["alma_mater"] = choice.id

    def _companies(self) -> None:
        """Companies founded by industrialists, merchants or engineers; many with a living CEO."""
        rng = self.rng
        industries = list(INDUSTRY_NAMES)
        weights = [4 if i in ("publishing", "film", "music") else 1 for i in industries]
        for _ in range(self.count("company")):
            industry = rng.choices(industries, weights)[0]
            since = INDUSTRY_SINCE.get(industry, 1700)
            founder = self.pick_person(
                ("industrialist", "merchant", "engineer"),
                (since - 50, 1985),
                accept=lambda p, s=since: self._can_found(p, s),
            )
            if founder is None:
                continue
            founded = self._found_year(founder, since)
            suffix = rng.choice(INDUSTRY_NAMES[industry])
            stem = founder.name.split(" ", 1)[1] if rng.random() < 0.3 else self.names.word()
            hq = self.city_before(founded, int(founder.facts["nationality"]))
            company = self.new(
                "company",
                f"{stem} {suffix}",
                industry=industry,
                headquarters=hq.id,
                founded=founded,
                founder=founder.id,
            )
            if rng.random() < 0.6:
                self.role(
                    company, "ceo", self.pick_person(("business executive",), (1950, 1985), living=True, reuse=0.1)
                )

    def _bands(self) -> None:
        """Bands with a genre, a home city and a lead singer."""
        rng = self.rng
        for _ in range(self.count("band")):
            formed = rng.randint(1955, 2018)
            form = rng.choice(("The {}s", "{} Quartet", "The {} Ensemble", "{} Brigade", "The {} Collective"))
            band = self.new(
                "band",
                form.format(self.names.word()),
                genre=rng.choice(GENRES),
                origin=self.city_before(formed).id,
                formed=formed,
            )
            self.role(band, "lead_singer", self.pick_person(("singer",), (formed - 30, formed - 17), alive_in=formed))

    def _clubs(self) -> None:
        """Football clubs with a stadium and, mostly, a living coach."""
        rng = self.rng
        for _ in range(self.count("club")):
            founded = rng.randint(1860, 1960)
            city = self.city_before(founded)
            form = rng.choice(("{} Rovers", "{} Athletic", "{} United", "Sporting {}"))
            club = self.new(
                "club",
                form.format(self.names.word()),
                city=city.id,
                founded=founded,
                stadium=f"{self.names.word()} {rng.choice(('Park', 'Ground', 'Arena', 'Stadium'))}",
            )
            if rng.random() < 0.8:
                self.role(club, "coach", self.pick_person(("football coach",), (1950, 1990), living=True))

    def _can_found(self, person: Entity, since: int) -> bool:
        birth = int(person.facts["birth_year"])
        last = min(int(person.facts.get("death_year", PRESENT_YEAR)), birth + 55, 2015)
        return max(birth + 25, since) <= last

    def _found_year(self, person: Entity, since: int) -> int:
        birth = int(person.facts["birth_year"])
        last = min(int(person.facts.get("death_year", PRESENT_YEAR)), birth + 55, 2015)
        return self.rng.randint(max(birth + 25, since), last)

    def _active_year(self, person: Entity, earliest: int, start_age: int = 22, end_age: int = 70) -> int | None:
        birth = int(person.facts["birth_year"])
        lo = max(birth + start_age, earliest)
        hi = min(int(person.facts.get("death_year", PRESENT_YEAR)), birth + end_age, PRESENT_YEAR - 1)
        return self.rng.randint(lo, hi) if lo <= hi else None

    def company_before(self, industry: str, year: int, country: int | None) -> Entity | None:
        pool = [c for c in self.companies[industry] if int(c.facts["founded"]) <= year]
        if not pool:
            return None
        local = [
            c
            for c in pool
            if country is not None and self.entities[int(c.facts["headquarters"])].facts["country"] == country
        ]
        return self.rng.choice(local if local and self.rng.random() < 0.7 else pool)

    def works(self) -> None:
        rng = self.rng
        self.companies: dict[str, list[Entity]] = {i: [] for i in INDUSTRY_NAMES}
        for company in self.of_kind("company"):
            self.companies[str(company.facts["industry"])].append(company)
        for _ in range(self.count("novel")):
            author = self.pick_person(("novelist",), (1650, 1995), reuse=0.45)
            year = author and self._active_year(author, 1670)
            if author is None or year is None:
                continue
            form = rng.choice(("The {n} of {w}", "{w}'s {n}", "A {s} in {w}", "The {w} {n}", "{n}s of {w}"))
            season = rng.choice(_SEASONS)
            form = form.replace("A {s}", "An {s}" if season[0] in "AEIOU" else "A {s}")
            title = form.format(n=rng.choice(_TITLE_NOUNS), w=self.names.word(), s=season)
            country = int(author.facts["nationality"])
            novel = self.new(
                "novel", title, author=author.id, published=year, language=self.entities[country].facts["language"]
            )
            if rng.random() < 0.75:
                self.role(novel, "publisher", self.company_before("publishing", year, country))
        for _ in range(self.count("film")):
            director = self.pick_person(("film director",), (1850, 1990), reuse=0.5)
            year = director and self._active_year(director, 1900, start_age=25)
            if director is None or year is None:
                continue
            form = rng.choice(
                ("{w}", "Night in {w}", "The {w} Affair", "Return to {w}", "{w} Station", "The Last Days of {w}")
            )
            film = self.new("film", form.format(w=self.names.word()), released=year, director=director.id)
            self.role(film, "star", self.pick_person(("actor",), (year - 60, year - 18), alive_in=year, reuse=0.5))
            if rng.random() < 0.8:
                self.role(film, "studio", self.company_before("film", year, int(director.facts["nationality"])))
            if rng.random() < 0.7:
                self.role(
                    film, "composer", self.pick_person(("composer",), (year - 70, year - 22), alive_in=year, reuse=0.5)
                )
        bands = self.of_kind("band")
        for _ in range(self.count("album")):
            band = rng.choice(bands)
            year = min(int(band.facts["formed"]) + rng.randint(0, 25), PRESENT_YEAR - 1)
            form = rng.choice(("{a} {w}", "{w} Nights", "Songs from {w}", "{w}"))
            album = self.new(
                "album", form.format(a=rng.choice(_ADJECTIVES), w=self.names.word()), artist=band.id, released=year
            )
            if rng.random() < 0.8:
                self.role(album, "label", self.company_before("music", year, None))
            if rng.random() < 0.7:
                self.role(
                    album,
                    "producer",
                    self.pick_person(("record producer",), (year - 60, year - 20), alive_in=year, reuse=0.5),
                )
        for _ in range(self.count("painting")):
            painter = self.pick_person(("painter",), (1650, 1995), reuse=0.5)
            year = painter and self._active_year(painter, 1670, start_age=18, end_age=85)
            if painter is None or year is None:
                continue
            form = rng.choice(("{w} at Dusk", "Morning in {w}", "The Garden at {w}", "View of {w}", "The {w} Triptych"))
            self.new(
                "painting",
                form.format(w=self.names.word()),
                painter=painter.id,
                year=year,
                museum_city=rng.choice(self.cities).id,
            )

    def events(self) -> None:
        rng = self.rng
        for _ in range(self.count("battle")):
            year = rng.randint(1680, 1950)
            battle = self.new("battle", f"Battle of {self.names.word()}", location=self.city_before(year).id, year=year)
            self.role(
                battle, "commander", self.pick_person(("general",), (year - 65, year - 25), alive_in=year, reuse=0.4)
            )
        for _ in range(self.count("festival")):
            year = rng.randint(1750, 2005)
            form = rng.choice(("{} Festival", "{} Music Festival", "{} Lantern Festival", "{} Harvest Fair"))
            festival = self.new(
                "festival",
                form.format(self.names.word()),
                city=self.city_before(year).id,
                month=rng.choice(MONTHS),
                first_held=year,
            )
            if rng.random() < 0.7:
                self.role(
                    festival,
                    "founder",
                    self.pick_person(
                        ("composer", "poet", "merchant", "politician"), (year - 70, year - 22), alive_in=year
                    ),
                )
        mountains = self.of_kind("mountain")
        for mountain in mountains:
            if rng.random() < 0.6:
                climber = self.pick_person(("mountaineer", "explorer"), (1750, 1985), reuse=0.4)
                year = climber and self._active_year(climber, 1780, start_age=20, end_age=50)
                if climber is not None and year is not None:
                    mountain.facts["first_ascent"], mountain.facts["ascent_year"] = climber.id, year
        universities = self.of_kind("university")
        for _ in range(self.count("expedition")):
            leader = self.pick_person(("explorer", "mountaineer"), (1720, 1985), reuse=0.4)
            year = leader and self._active_year(leader, 1750, start_age=25, end_age=55)
            if leader is None or year is None:
                continue
            expedition = self.new(
                "expedition",
                f"{self.names.word()} Expedition",
                destination=rng.choice(mountains).id,
                year=year,
                leader=leader.id,
            )
            sponsors = [u for u in universities if int(u.facts["founded"]) <= year]
            if sponsors and rng.random() < 0.6:
                expedition.facts["sponsor"] = rng.choice(sponsors).id
        countries = self.of_kind("country")
        for _ in range(self.count("treaty")):
            year = rng.randint(1500, 1990)
            party_a, party_b = rng.sample(countries, 2)
            form = rng.choice(("Treaty of {}", "{} Accord", "Peace of {}"))
            self.new(
                "treaty",
                form.format(self.names.word()),
                party_a=party_a.id,
                party_b=party_b.id,
                signed_in=self.city_before(year, party_a.id).id,
                year=year,
            )

    def finish(self) -> None:
        for person in self.entities:
            if person.kind == "person" and "occupation" not in person.facts:
                person.facts["occupation"] = self.rng.choice(FREE_OCCUPATIONS)
        for entity in self.entities:
            for key, value in entity.facts.items():
                if (entity.kind, key) in CAREER_PHRASES:
                    self.entities[int(value)].roles.append((entity.kind, key, entity.id))


def generate_world(seed: int = 0, scale: float = 1.0) -> World:
    """The world for ``seed``; ``scale`` multiplies every entity count (1.0: ~3,600 articles)."""
    builder = _Builder(seed, scale)
    builder.places()
    builder.people()
    builder.organisations()
    builder.works()
    builder.events()
    builder.finish()
    return World(seed, builder.entities)
