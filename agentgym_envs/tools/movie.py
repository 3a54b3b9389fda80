"""``AgentGym/Movie-v0``: a film database with TMDB-like tools.

Upstream calls The Movie Database API. Here a seeded generator fills SQLite with 1,200 films,
2,600 people, their cast and crew credits, ratings, budgets, production companies, countries and
keywords. Regular actors recur across dozens of films (a long-tailed draw), so person questions need
several lookups.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from functools import lru_cache
from typing import Any

import numpy as np

from agentgym_envs.tools.answers import Gold
from agentgym_envs.tools.base import SharedWorldEnv, TaskDraw, ToolTask, finish_step, step, template_generator
from agentgym_envs.tools.names import (
    ADJECTIVES,
    CITIES,
    COUNTRY_CODES,
    FIRST_NAMES,
    GENRES,
    KEYWORDS,
    LAST_NAMES,
    NOUNS,
    PLACES,
    STUDIOS,
    unique_names,
)
from agentgym_envs.tools.toolkit import Param, Service, ToolError, load_env_texts, load_tools

WORLD_SEED = 7_002
N_FILMS = 1_200
DEPARTMENTS = {"Acting": 1_800, "Directing": 260, "Writing": 200, "Sound": 90, "Camera": 100, "Production": 150}
CREW_JOBS = (
    ("Director", "Directing"),
    ("Screenplay", "Writing"),
    ("Producer", "Production"),
    ("Original Music Composer", "Sound"),
    ("Director of Photography", "Camera"),
)
LANGUAGES = ("en", "en", "en", "fr", "es", "ja", "ko", "de", "it", "hi")


def _titles(rng: np.random.Generator, count: int) -> list[str]:
    pool = [f"The {a} {n}" for a in ADJECTIVES for n in NOUNS]
    pool += [f"{n} of {p}" for n in NOUNS for p in PLACES]
    pool += [f"Return to {p}" for p in PLACES] + [f"Letters from {p}" for p in PLACES]
    order = rng.permutation(len(pool))[:count]
    return [pool[i] for i in order]


def _character(rng: np.random.Generator, used: set[str]) -> str:
    while True:
        roll = rng.random()
        last = LAST_NAMES[int(rng.integers(len(LAST_NAMES)))]
        if roll < 0.25:
            name = f"{('Detective', 'Captain', 'Dr.', 'Professor', 'Agent', 'Sister')[int(rng.integers(6))]} {last}"
        else:
            name = f"{FIRST_NAMES[int(rng.integers(len(FIRST_NAMES)))]} {last}"
        if name not in used:
            used.add(name)
            return name


#: (indented as it was written inside world(): sqlite_master keeps the text as given)
_SCHEMA = """
        CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, gender TEXT, birthday TEXT,
                             place_of_birth TEXT, known_for_department TEXT);
        CREATE TABLE movies (id INTEGER PRIMARY KEY, title TEXT UNIQUE NOT NULL, release_date TEXT, runtime INTEGER,
                             budget INTEGER, revenue INTEGER, vote_average REAL, vote_count INTEGER, original_language \
TEXT);
        CREATE TABLE movie_genres (movie_id INTEGER REFERENCES movies(id), genre TEXT);
        CREATE TABLE companies (id INTEGER PRIMARY KEY, name TEXT, origin_country TEXT);
        CREATE TABLE movie_companies (movie_id INTEGER REFERENCES movies(id), company_id INTEGER REFERENCES \
companies(id));
        CREATE TABLE movie_countries (movie_id INTEGER REFERENCES movies(id), iso_3166_1 TEXT, name TEXT);
        CREATE TABLE movie_keywords (movie_id INTEGER REFERENCES movies(id), keyword TEXT);
        CREATE TABLE cast_credits (movie_id INTEGER REFERENCES movies(id), person_id INTEGER REFERENCES people(id),
                                   character TEXT, cast_order INTEGER);
        CREATE TABLE crew_credits (movie_id INTEGER REFERENCES movies(id), person_id INTEGER REFERENCES people(id),
                                   job TEXT, department TEXT);
        CREATE INDEX cast_person ON cast_credits(person_id);
        CREATE INDEX crew_person ON crew_credits(person_id);
        CREATE INDEX cast_movie ON cast_credits(movie_id);
        CREATE INDEX crew_movie ON crew_credits(movie_id);
        """


@lru_cache(maxsize=1)
def world() -> sqlite3.Connection:
    """The shared master film database (envs work on clones)."""
    rng = np.random.default_rng(WORLD_SEED)
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript(_SCHEMA)
    casting = _Casting(_people(db, rng), rng)
    countries = list(COUNTRY_CODES.items())
    db.executemany(
        "INSERT INTO companies VALUES (?, ?, ?)",
        [(i, name, countries[int(rng.integers(len(countries)))][1]) for i, name in enumerate(STUDIOS, start=1)],
    )
    for table, rows in _films(rng, countries, casting).items():
        db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    db.commit()
    return db


def _people(db: sqlite3.Connection, rng: np.random.Generator) -> dict[str, list[int]]:
    """Actors and crew, ``DEPARTMENTS[d]`` of each department; returns the person ids of each department."""
    names = unique_names(rng, sum(DEPARTMENTS.values()))
    people_by_dept: dict[str, list[int]] = {}
    person_id = 0
    people_rows = []
    for department, count in DEPARTMENTS.items():
        for _ in range(count):
            person_id += 1
            born = dt.date(1935, 1, 1) + dt.timedelta(days=int(rng.integers(0, 365 * 68)))
            city = CITIES[int(rng.integers(len(CITIES)))]
            people_rows.append(
                (
                    person_id,
                    names[person_id - 1],
                    ("female", "male")[int(rng.integers(2))],
                    born.isoformat(),
                    f"{city[0]}, {city[1]}",
                    department,
                )
            )
            people_by_dept.setdefault(department, []).append(person_id)
    db.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)", people_rows)
    return people_by_dept


class _Casting:
    """Draws the people of a film: weights 1/(rank + 60) within a department, so a few regulars recur
    across dozens of films and a long tail has one film each."""

    def __init__(self, people_by_dept: dict[str, list[int]], rng: np.random.Generator):
        self.people_by_dept, self.rng = people_by_dept, rng
        weights = {d: 1.0 / (np.arange(1, len(pool) + 1) + 60.0) for d, pool in people_by_dept.items()}
        self.cumulative = {d: np.cumsum(w) / w.sum() for d, w in weights.items()}

    def popular(self, department: str, k: int) -> list[int]:
        """k distinct people of a department."""
        pool, chosen = self.people_by_dept[department], []
        while len(chosen) < k:
            index = int(np.searchsorted(self.cumulative[department], self.rng.random(), side="right"))
            person = pool[min(index, len(pool) - 1)]
            if person not in chosen:
                chosen.append(person)
        return chosen


def _films(
    rng: np.random.Generator, countries: list[tuple[str, str]], casting: _Casting
) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of every film table (films, genres, companies, countries, keywords, cast, crew)."""
    tables: dict[str, list[tuple[Any, ...]]] = {
        name: []
        for name in (
            "movies",
            "movie_genres",
            "movie_companies",
            "movie_countries",
            "movie_keywords",
            "cast_credits",
            "crew_credits",
        )
    }
    for movie_id, title in enumerate(_titles(rng, N_FILMS), start=1):
        release = dt.date(1970, 1, 1) + dt.timedelta(days=int(rng.integers(0, 365 * 54)))
        budget = int(rng.integers(5, 2_000)) * 100_000
        revenue = int(budget * rng.lognormal(0.4, 0.9)) // 1000 * 1000
        tables["movies"].append(
            (
                movie_id,
                title,
                release.isoformat(),
                int(rng.integers(78, 181)),
                budget,
                revenue,
                round(float(np.clip(rng.normal(6.4, 1.0), 1.5, 9.6)), 1),
                int(rng.lognormal(6.5, 1.3)),
                LANGUAGES[int(rng.integers(len(LANGUAGES)))],
            )
        )
        tables["movie_genres"] += [
            (movie_id, str(g)) for g in rng.choice(GENRES, size=int(rng.integers(1, 4)), replace=False)
        ]
        tables["movie_companies"] += [
            (movie_id, int(c) + 1) for c in rng.choice(len(STUDIOS), size=int(rng.choice([1, 1, 2, 3])), replace=False)
        ]
        tables["movie_countries"] += [
            (movie_id, countries[int(i)][1], countries[int(i)][0])
            for i in rng.choice(len(countries), size=int(rng.choice([1, 1, 2])), replace=False)
        ]
        tables["movie_keywords"] += [
            (movie_id, str(k)) for k in rng.choice(KEYWORDS, size=int(rng.integers(2, 6)), replace=False)
        ]
        used: set[str] = set()
        tables["cast_credits"] += [
            (movie_id, actor, _character(rng, used), order)
            for order, actor in enumerate(casting.popular("Acting", int(rng.integers(5, 11))))
        ]
        for job, department in CREW_JOBS:
            count = (
                1
                if job in ("Director", "Original Music Composer", "Director of Photography")
                else int(rng.integers(1, 3))
            )
            tables["crew_credits"] += [(movie_id, person, job, department)
                                       for person in casting.popular(department, count)]
    return tables


class MovieService(Service):
    """TMDB-like film tools over the generated database (read-only)."""

    TOOLS = load_tools("movie")

    def example_strings(self) -> list[str]:
        """Words that appear in generated titles and names, so random searches find something."""
        return ["The Silent River", "Harbor", "Garcia", "Maria", "Return to Kyoto"]

    def example_value(self, param: Param, rng: Any) -> Any:
        """A random id in the range of film and person ids for integer arguments, else the default."""
        if param.type == "integer":
            return int(rng.integers(1, 2_700))
        return super().example_value(param, rng)

    def _movie(self, movie_id: int) -> tuple[Any, ...]:
        row = self.db.execute("SELECT * FROM movies WHERE id = ?", (movie_id,)).fetchone()
        if row is None:
            raise ToolError(f"no film with id {movie_id}; find ids with search_movie.")
        return row

    def _person(self, person_id: int) -> tuple[Any, ...]:
        row = self.db.execute("SELECT * FROM people WHERE id = ?", (person_id,)).fetchone()
        if row is None:
            raise ToolError(f"no person with id {person_id}; find ids with search_person.")
        return row

    def _records(self, sql: str, key: int | str, names: tuple[str, ...]) -> list[dict[str, Any]]:
        """The rows of ``sql`` (one ``?``, bound to ``key``) as the tools' JSON objects, columns named by ``names``."""
        return [dict(zip(names, row)) for row in self.db.execute(sql, (key,)).fetchall()]

    @staticmethod
    def _needle(text: str, what: str) -> str:
        needle = " ".join(text.split()).lower()
        if len(needle) < 2:
            raise ToolError(f"{what} must have at least 2 characters.")
        return needle

    def search_movie(self, movie_name: str) -> dict[str, Any]:
        """The ``search_movie`` tool: search films by title (case-insensitive, part of a title works).

        Args:
            movie_name: the title or part of it.

        Returns:
            {"results": [{"id", "title", "release_date"}, ...]} (at most 20).
        """
        needle = self._needle(movie_name, "movie_name")
        sql = "SELECT id, title, release_date FROM movies WHERE instr(lower(title), ?) > 0 ORDER BY title LIMIT 20"
        return {"results": self._records(sql, needle, ("id", "title", "release_date"))}

    def get_movie_details(self, movie_id: int) -> dict[str, Any]:
        """The ``get_movie_details`` tool: get a film's main facts.

        Args:
            movie_id: the film's id (from search_movie).

        Returns:
            {"id", "title", "release_date", "runtime" (minutes), "genres", "budget" (USD), "revenue" (USD),
                "vote_average", "vote_count", "original_language"}.
        """
        row = self._movie(movie_id)
        genres = [
            g[0]
            for g in self.db.execute("SELECT genre FROM movie_genres WHERE movie_id = ? ORDER BY rowid", (movie_id,))
        ]
        keys = (
            "id",
            "title",
            "release_date",
            "runtime",
            "budget",
            "revenue",
            "vote_average",
            "vote_count",
            "original_language",
        )
        details = dict(zip(keys, row))
        details["genres"] = genres
        return details

    def get_movie_production_companies(self, movie_id: int) -> list[dict[str, Any]]:
        """The ``get_movie_production_companies`` tool: get the companies that produced a film.

        Args:
            movie_id: the film's id (from search_movie).

        Returns:
            [{"id", "name", "origin_country"}, ...].
        """
        self._movie(movie_id)
        return self._records(
            "SELECT c.id, c.name, c.origin_country FROM movie_companies m JOIN companies c ON c.id = m.company_id "
            "WHERE m.movie_id = ? ORDER BY m.rowid",
            movie_id,
            ("id", "name", "origin_country"),
        )

    def get_movie_production_countries(self, movie_id: int) -> list[dict[str, Any]]:
        """The ``get_movie_production_countries`` tool: get the countries a film was produced in.

        Args:
            movie_id: the film's id (from search_movie).

        Returns:
            [{"iso_3166_1", "name"}, ...].
        """
        self._movie(movie_id)
        return self._records(
            "SELECT iso_3166_1, name FROM movie_countries WHERE movie_id = ? ORDER BY rowid",
            movie_id,
            ("iso_3166_1", "name"),
        )

    def get_movie_keywords(self, movie_id: int) -> list[str]:
        """The ``get_movie_keywords`` tool: get a film's keywords.

        Args:
            movie_id: the film's id (from search_movie).

        Returns:
            A list of strings.
        """
        self._movie(movie_id)
        return [
            r[0]
            for r in self.db.execute(
                "SELECT keyword FROM movie_keywords WHERE movie_id = ? ORDER BY rowid", (movie_id,)
            )
        ]

    def get_movie_cast(self, movie_id: int) -> list[dict[str, Any]]:
        """The ``get_movie_cast`` tool: get a film's cast in billing order.

        Args:
            movie_id: the film's id (from search_movie).

        Returns:
            [{"person_id", "name", "character", "order"}, ...].
        """
        self._movie(movie_id)
        return self._records(
            "SELECT c.person_id, p.name, c.character, c.cast_order FROM cast_credits c JOIN people p ON p.id = "
            "c.person_id WHERE c.movie_id = ? ORDER BY c.cast_order",
            movie_id,
            ("person_id", "name", "character", "order"),
        )

    def get_movie_crew(self, movie_id: int) -> list[dict[str, Any]]:
        """The ``get_movie_crew`` tool: get a film's crew.

        Args:
            movie_id: the film's id (from search_movie).

        Returns:
            [{"person_id", "name", "job", "department"}, ...].
        """
        self._movie(movie_id)
        return self._records(
            "SELECT c.person_id, p.name, c.job, c.department FROM crew_credits c JOIN people p ON p.id = c.person_id "
            "WHERE c.movie_id = ? ORDER BY c.rowid",
            movie_id,
            ("person_id", "name", "job", "department"),
        )

    def search_person(self, person_name: str) -> dict[str, Any]:
        """The ``search_person`` tool: search people (actors and crew) by name (case-insensitive, part of a name works).

        Args:
            person_name: the name or part of it.

        Returns:
            {"results": [{"id", "name", "known_for_department"}, ...]} (at most 20).
        """
        needle = self._needle(person_name, "person_name")
        sql = "SELECT id, name, known_for_department FROM people WHERE instr(lower(name), ?) > 0 ORDER BY name LIMIT 20"
        return {"results": self._records(sql, needle, ("id", "name", "known_for_department"))}

    def get_person_details(self, person_id: int) -> dict[str, Any]:
        """The ``get_person_details`` tool: get a person's facts.

        Args:
            person_id: the person's id (from search_person).

        Returns:
            {"id", "name", "gender", "birthday", "place_of_birth", "known_for_department"}.
        """
        return dict(
            zip(("id", "name", "gender", "birthday", "place_of_birth", "known_for_department"), self._person(person_id))
        )

    def get_person_cast(self, person_id: int) -> list[dict[str, Any]]:
        """The ``get_person_cast`` tool: get the films a person acted in.

        Args:
            person_id: the person's id (from search_person).

        Returns:
            [{"movie_id", "title", "character", "release_date"}, ...] sorted by release date.
        """
        self._person(person_id)
        return self._records(
            "SELECT m.id, m.title, c.character, m.release_date FROM cast_credits c JOIN movies m ON m.id = c.movie_id "
            "WHERE c.person_id = ? ORDER BY m.release_date, m.id",
            person_id,
            ("movie_id", "title", "character", "release_date"),
        )

    def get_person_crew(self, person_id: int) -> list[dict[str, Any]]:
        """The ``get_person_crew`` tool: get the films a person worked on as crew.

        Args:
            person_id: the person's id (from search_person).

        Returns:
            [{"movie_id", "title", "job", "release_date"}, ...] sorted by release date.
        """
        self._person(person_id)
        return self._records(
            "SELECT m.id, m.title, c.job, m.release_date FROM crew_credits c JOIN movies m ON m.id = c.movie_id "
            "WHERE c.person_id = ? ORDER BY m.release_date, m.id, c.job",
            person_id,
            ("movie_id", "title", "job", "release_date"),
        )


# ---- task generation ---------------------------------------------------------------------------


class _Generator(TaskDraw):
    s: MovieService

    def film(self) -> tuple[int, str]:
        movie_id = int(self.rng.integers(1, N_FILMS + 1))
        return movie_id, self.one("SELECT title FROM movies WHERE id = ?", movie_id)[0]

    def person_with(self, sql: str) -> tuple[int, str] | None:
        candidates = self.all(sql)
        if not candidates:
            return None
        return tuple(candidates[int(self.rng.integers(len(candidates)))])  # type: ignore[return-value]

    def find_film(self, movie_id: int, title: str):
        return step(f"Find the id of '{title}'.", "search_movie", movie_name=title)

    def find_person(self, name: str):
        return step(f"Find the id of {name}.", "search_person", person_name=name)


def _director(g: _Generator) -> ToolTask | None:
    movie_id, title = g.film()
    rows = g.all(
        "SELECT p.name FROM crew_credits c JOIN people p ON p.id = c.person_id WHERE c.movie_id = ? AND c.job = "
        "'Director'",
        movie_id,
    )
    name = rows[0][0]
    return ToolTask(
        "director",
        f"Who directed the film '{title}'?",
        [
            g.find_film(movie_id, title),
            step("The director is in the crew list.", "get_movie_crew", movie_id=movie_id),
            finish_step(name),
        ],
        Gold(name),
    )


def _release_year(g: _Generator) -> ToolTask:
    movie_id, title = g.film()
    year = int(g.one("SELECT substr(release_date, 1, 4) FROM movies WHERE id = ?", movie_id)[0])
    return ToolTask(
        "release_year",
        f"In which year was '{title}' released?",
        [
            g.find_film(movie_id, title),
            step("The release date is in the details.", "get_movie_details", movie_id=movie_id),
            finish_step(year),
        ],
        Gold(year, "number"),
    )


def _character_actor(g: _Generator) -> ToolTask:
    movie_id, title = g.film()
    cast = g.all(
        "SELECT p.name, c.character FROM cast_credits c JOIN people p ON p.id = c.person_id WHERE c.movie_id = ? ORDER "
        "BY c.cast_order",
        movie_id,
    )
    name, character = cast[int(g.rng.integers(len(cast)))]
    return ToolTask(
        "character_actor",
        f"Which actor played {character} in '{title}'?",
        [
            g.find_film(movie_id, title),
            step("Look through the cast.", "get_movie_cast", movie_id=movie_id),
            finish_step(name, f"{character} was played by {name}."),
        ],
        Gold(name),
    )


def _actor_film_count(g: _Generator) -> ToolTask | None:
    picked = g.person_with(
        "SELECT id, name FROM people WHERE known_for_department = 'Acting' AND id IN (SELECT person_id FROM "
        "cast_credits)"
    )
    if picked is None:
        return None
    person_id, name = picked
    count = g.one("SELECT COUNT(DISTINCT movie_id) FROM cast_credits WHERE person_id = ?", person_id)[0]
    return ToolTask(
        "actor_film_count",
        f"In how many films of the database has {name} acted?",
        [
            g.find_person(name),
            step("Count the acting credits.", "get_person_cast", person_id=person_id),
            finish_step(count, f"{name} has {count} acting credits."),
        ],
        Gold(count, "number"),
    )


def _best_rated_film_of_actor(g: _Generator) -> ToolTask | None:
    picked = g.person_with(
        "SELECT person_id, p.name FROM cast_credits c JOIN people p ON p.id = c.person_id "
        "GROUP BY person_id HAVING COUNT(*) BETWEEN 2 AND 6"
    )
    if picked is None:
        return None
    person_id, name = picked
    films = g.all(
        "SELECT m.id, m.title, m.vote_average FROM cast_credits c JOIN movies m ON m.id = c.movie_id "
        "WHERE c.person_id = ? ORDER BY m.release_date, m.id",
        person_id,
    )
    ratings = sorted((f[2] for f in films), reverse=True)
    if ratings[0] == ratings[1]:
        return None
    best = max(films, key=lambda f: f[2])
    plan = [g.find_person(name), step("List the films they acted in.", "get_person_cast", person_id=person_id)]
    plan += [step(f"Check the rating of '{f[1]}'.", "get_movie_details", movie_id=f[0]) for f in films]
    plan.append(finish_step(best[1], f"'{best[1]}' has the highest rating, {best[2]}."))
    return ToolTask(
        "best_rated_film_of_actor",
        f"Which film with {name} in the cast has the highest average rating?",
        plan,
        Gold(best[1]),
    )


def _director_birthplace(g: _Generator) -> ToolTask:
    movie_id, title = g.film()
    person_id, name = g.one(
        "SELECT p.id, p.name FROM crew_credits c JOIN people p ON p.id = c.person_id WHERE c.movie_id = ? AND c.job = "
        "'Director'",
        movie_id,
    )
    place = g.one("SELECT place_of_birth FROM people WHERE id = ?", person_id)[0]
    city = place.split(",")[0]
    return ToolTask(
        "director_birthplace",
        f"In which city was the director of '{title}' born?",
        [
            g.find_film(movie_id, title),
            step("Find the director in the crew.", "get_movie_crew", movie_id=movie_id),
            step(f"The director is {name}; get their details.", "get_person_details", person_id=person_id),
            finish_step(city, f"{name} was born in {place}."),
        ],
        Gold(city),
    )


def _profit(g: _Generator) -> ToolTask:
    movie_id, title = g.film()
    budget, revenue = g.one("SELECT budget, revenue FROM movies WHERE id = ?", movie_id)
    return ToolTask(
        "profit",
        f"How much more did '{title}' earn than it cost? Give revenue minus budget in US dollars.",
        [
            g.find_film(movie_id, title),
            step("Budget and revenue are in the details.", "get_movie_details", movie_id=movie_id),
            finish_step(revenue - budget, f"{revenue} - {budget} = {revenue - budget}."),
        ],
        Gold(revenue - budget, "number", tolerance=0.5),
    )


def _shared_film(g: _Generator) -> ToolTask | None:
    movie_id, title = g.film()
    cast = g.all(
        "SELECT c.person_id, p.name FROM cast_credits c JOIN people p ON p.id = c.person_id WHERE c.movie_id = ?",
        movie_id,
    )
    order = g.rng.permutation(len(cast))
    (a_id, a_name), (b_id, b_name) = cast[int(order[0])], cast[int(order[1])]
    shared = g.all(
        "SELECT movie_id FROM cast_credits WHERE person_id = ? INTERSECT SELECT movie_id FROM cast_credits WHERE "
        "person_id = ?",
        a_id,
        b_id,
    )
    if len(shared) != 1:
        return None
    return ToolTask(
        "shared_film",
        f"Name the film in which both {a_name} and {b_name} appear in the cast.",
        [
            g.find_person(a_name),
            g.find_person(b_name),
            step(f"Films of {a_name}.", "get_person_cast", person_id=a_id),
            step(f"Films of {b_name}.", "get_person_cast", person_id=b_id),
            finish_step(title, f"'{title}' is the only film in both lists."),
        ],
        Gold(title),
    )


def _production_company(g: _Generator) -> ToolTask | None:
    movie_id, title = g.film()
    rows = g.all(
        "SELECT c.name FROM movie_companies m JOIN companies c ON c.id = m.company_id WHERE m.movie_id = ?", movie_id
    )
    if len(rows) != 1:
        return None
    return ToolTask(
        "production_company",
        f"Which company produced '{title}'?",
        [
            g.find_film(movie_id, title),
            step("Get the production companies.", "get_movie_production_companies", movie_id=movie_id),
            finish_step(rows[0][0]),
        ],
        Gold(rows[0][0]),
    )


def _composer_of_latest(g: _Generator) -> ToolTask | None:
    picked = g.person_with(
        "SELECT person_id, p.name FROM crew_credits c JOIN people p ON p.id = c.person_id "
        "WHERE job = 'Director' GROUP BY person_id HAVING COUNT(*) >= 2"
    )
    if picked is None:
        return None
    person_id, name = picked
    films = g.all(
        "SELECT m.id, m.title, m.release_date FROM crew_credits c JOIN movies m ON m.id = c.movie_id "
        "WHERE c.person_id = ? AND c.job = 'Director' ORDER BY m.release_date DESC",
        person_id,
    )
    if films[0][2] == films[1][2]:
        return None
    latest_id, latest_title, _ = films[0]
    composer = g.one(
        "SELECT p.name FROM crew_credits c JOIN people p ON p.id = c.person_id "
        "WHERE c.movie_id = ? AND c.job = 'Original Music Composer'",
        latest_id,
    )[0]
    return ToolTask(
        "composer_of_latest",
        f"Who composed the original music of the most recent film directed by {name}?",
        [
            g.find_person(name),
            step("List their crew credits to find the films they directed.", "get_person_crew", person_id=person_id),
            step(f"The latest is '{latest_title}'; check its crew.", "get_movie_crew", movie_id=latest_id),
            finish_step(composer),
        ],
        Gold(composer),
    )


TEMPLATES = (_director, _release_year, _character_actor, _actor_film_count, _best_rated_film_of_actor,
             _director_birthplace, _profit, _shared_film, _production_company, _composer_of_latest)


generate = template_generator(WORLD_SEED, TEMPLATES, _Generator)


class MovieEnv(SharedWorldEnv):
    """Film questions answered with TMDB-like tools."""

    subtask = "Movie"
    # agentgym_hint: AgentGym's, with our search tools' names (its are get_search_person, get_search_movie)
    intro, example_call, agentgym_hint = load_env_texts("movie")

    service_class = MovieService
    build_world = world
    generate_task = generate
