"""The generated ``football_league`` database: its schema and its data (its questions: ``questions.json``)."""

from __future__ import annotations

import datetime as dt
import sqlite3

import numpy as np

from agentgym_envs.tools.bird_data.common import dates, pick
from agentgym_envs.tools.names import CITIES, LAST_NAMES, unique_names

SCHEMA = """
CREATE TABLE teams (
    team_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    city TEXT,
    founded INTEGER,
    stadium TEXT,
    capacity INTEGER
);
CREATE TABLE players (
    player_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    team_id INTEGER REFERENCES teams(team_id),
    position TEXT, -- 'goalkeeper', 'defender', 'midfielder' or 'forward'
    birth_date TEXT, -- YYYY-MM-DD
    nationality TEXT
);
CREATE TABLE matches (
    match_id INTEGER PRIMARY KEY,
    season TEXT NOT NULL, -- e.g. '2019-20'
    match_date TEXT NOT NULL, -- YYYY-MM-DD
    home_team_id INTEGER NOT NULL REFERENCES teams(team_id),
    away_team_id INTEGER NOT NULL REFERENCES teams(team_id),
    home_goals INTEGER NOT NULL,
    away_goals INTEGER NOT NULL,
    attendance INTEGER
);
CREATE TABLE goals (
    goal_id INTEGER PRIMARY KEY,
    match_id INTEGER NOT NULL REFERENCES matches(match_id),
    player_id INTEGER NOT NULL REFERENCES players(player_id),
    team_id INTEGER NOT NULL REFERENCES teams(team_id), -- the team that scored
    minute INTEGER,
    is_penalty INTEGER -- 1 = penalty kick
);
CREATE TABLE appearances (
    match_id INTEGER NOT NULL REFERENCES matches(match_id),
    player_id INTEGER NOT NULL REFERENCES players(player_id),
    minutes_played INTEGER,
    PRIMARY KEY (match_id, player_id)
);
"""

DB_ID = "football_league"
TEAM_WORDS = ("United", "City", "Rovers", "Athletic", "Wanderers", "Albion", "Rangers", "Town", "FC", "Sporting")
NATIONALITIES = ("England", "Spain", "France", "Brazil", "Argentina", "Germany", "Nigeria", "Japan", "Portugal",
                 "Netherlands", "Ghana", "Norway")
POSITIONS = (("goalkeeper", 3), ("defender", 10), ("midfielder", 10), ("forward", 7))
SEASONS = ("2019-20", "2020-21", "2021-22", "2022-23", "2023-24")


Squads = dict[int, list[tuple[int, str]]]


def build(db: sqlite3.Connection, rng: np.random.Generator) -> None:
    """Fill the tables; the steps draw from ``rng`` in this order."""
    teams = _teams(db, rng)
    squad = _players(db, rng)
    _matches(db, rng, teams, squad)


def _teams(db: sqlite3.Connection, rng: np.random.Generator) -> list[tuple]:
    """Twenty teams with unique names and unique stadiums."""
    cities = [
        c[0]
        for c in CITIES
        if c[1] in ("United Kingdom", "Germany", "France", "Spain", "Italy", "Netherlands", "Portugal")
    ]
    teams = []
    used = set()
    for team_id in range(1, 21):
        while True:
            name = f"{pick(rng, cities + LAST_NAMES[:30])} {pick(rng, TEAM_WORDS)}"
            if name not in used:
                used.add(name)
                break
        teams.append(
            (
                team_id,
                name,
                pick(rng, cities),
                int(rng.integers(1870, 1960)),
                (
                    f"{LAST_NAMES[int(rng.integers(len(LAST_NAMES)))]} Park"
                    if rng.random() < 0.5
                    else f"{name.split()[0]} Arena"
                ),
                int(rng.integers(12, 75)) * 1000,
            )
        )
    stadiums = set()
    for i, t in enumerate(teams):  # stadium names must be unique
        stadium = t[4]
        while stadium in stadiums:
            stadium = stadium + " II"
        stadiums.add(stadium)
        teams[i] = t[:4] + (stadium,) + t[5:]
    db.executemany("INSERT INTO teams VALUES (?, ?, ?, ?, ?, ?)", teams)
    return teams


def _players(db: sqlite3.Connection, rng: np.random.Generator) -> Squads:
    """Thirty players a team; returns each team's (player id, position) list."""
    names = unique_names(rng, 600)
    players = []
    squad: dict[int, list[tuple[int, str]]] = {}
    for team_id in range(1, 21):
        for position, count in POSITIONS:
            for _ in range(count):
                pid = len(players) + 1
                players.append(
                    (
                        pid,
                        names[pid - 1],
                        team_id,
                        position,
                        dates(rng, dt.date(1985, 1, 1), 365 * 20, 1)[0],
                        pick(rng, NATIONALITIES),
                    )
                )
                squad.setdefault(team_id, []).append((pid, position))
    db.executemany("INSERT INTO players VALUES (?, ?, ?, ?, ?, ?)", players)
    return squad


def _matches(db: sqlite3.Connection, rng: np.random.Generator, teams: list[tuple], squad: Squads) -> None:
    """Five double round-robin seasons: scores from team strengths, line-ups, minutes and scorers."""
    strength = rng.normal(1.35, 0.35, 21)
    scoring = {
        pid: {"goalkeeper": 0.01, "defender": 0.15, "midfielder": 0.5, "forward": 1.6}[pos] * rng.lognormal(0, 0.6)
        for team in squad.values()
        for pid, pos in team
    }
    matches, goals, appearances = [], [], []
    for season_index, season in enumerate(SEASONS):
        first_day = dt.date(2019 + season_index, 8, 10)
        fixtures = [(h, a) for h in range(1, 21) for a in range(1, 21) if h != a]
        order = rng.permutation(len(fixtures))
        for k, index in enumerate(order):
            home, away = fixtures[int(index)]
            match_id = len(matches) + 1
            day = first_day + dt.timedelta(days=int(k * 280 / len(fixtures)))
            hg, ag = int(rng.poisson(max(0.2, strength[home] + 0.25 - 0.3 * strength[away] + 0.4))), int(
                rng.poisson(max(0.2, strength[away] - 0.3 * strength[home] + 0.4))
            )
            matches.append(
                (
                    match_id,
                    season,
                    day.isoformat(),
                    home,
                    away,
                    hg,
                    ag,
                    int(teams[home - 1][5] * rng.uniform(0.55, 1.0)),
                )
            )
            for team, count in ((home, hg), (away, ag)):
                lineup = [p for p, pos in squad[team] if pos == "goalkeeper"][:1]
                field = [p for p, pos in squad[team] if pos != "goalkeeper"]
                lineup += [field[int(i)] for i in rng.choice(len(field), size=13, replace=False)]
                minutes = {p: (90 if i < 11 else int(rng.integers(5, 40))) for i, p in enumerate(lineup)}
                appearances += [(match_id, p, m) for p, m in minutes.items()]
                weights = np.array([scoring[p] for p in lineup[1:]])
                for scorer in rng.choice(lineup[1:], size=count, p=weights / weights.sum()):
                    goals.append(
                        (len(goals) + 1, match_id, int(scorer), team, int(rng.integers(1, 91)), int(rng.random() < 0.1))
                    )
    db.executemany("INSERT INTO matches VALUES (?, ?, ?, ?, ?, ?, ?, ?)", matches)
    db.executemany("INSERT INTO goals VALUES (?, ?, ?, ?, ?, ?)", goals)
    db.executemany("INSERT INTO appearances VALUES (?, ?, ?)", appearances)

