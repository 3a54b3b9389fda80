"""``AgentGym/Weather-v0``: weather history, forecasts and air quality per city and date.

Upstream (AgentBoard/AgentGym "weather") calls the Open-Meteo APIs. Here a seeded climate model
fills a SQLite table with one row per city and day (2022-01-01 to 2024-12-31, 59 real cities with
their real coordinates and elevations): temperatures with a seasonal cycle by latitude, rain or
snow, an air-quality index. Each item fixes the user's "today" and location; dates before today
are history, today and the next 15 days are the forecast.
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from agentgym_envs.tools.answers import Gold
from agentgym_envs.tools.base import SharedWorldEnv, Step, TaskDraw, ToolTask, draw_item, finish_step, step
from agentgym_envs.tools.names import CITIES
from agentgym_envs.tools.toolkit import Param, Service, ToolError, load_env_texts, load_tools

FIRST_DAY = dt.date(2022, 1, 1)
LAST_DAY = dt.date(2024, 12, 31)
FORECAST_DAYS = 16
MAX_RANGE_DAYS = 62
WORLD_SEED = 7_001
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
AQI_LEVELS = (
    (50, "good"),
    (100, "fair"),
    (150, "moderate"),
    (200, "poor"),
    (300, "very poor"),
    (10**9, "extremely poor"),
)


@lru_cache(maxsize=1)
def world() -> sqlite3.Connection:
    """The shared master store (built once per process, never handed out: envs get clones)."""
    rng = np.random.default_rng(WORLD_SEED)
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript("""
        CREATE TABLE cities (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL,
                             latitude REAL NOT NULL, longitude REAL NOT NULL, elevation INTEGER NOT NULL);
        CREATE TABLE daily (city_id INTEGER NOT NULL REFERENCES cities(id), date TEXT NOT NULL,
                            temperature_max REAL, temperature_min REAL, temperature_mean REAL,
                            rain_sum REAL, snowfall_sum REAL, aqi INTEGER, PRIMARY KEY (city_id, date));
        """)
    days = (LAST_DAY - FIRST_DAY).days + 1
    n = len(CITIES)
    dates = [(FIRST_DAY + dt.timedelta(days=d)).isoformat() for d in range(days)]
    day_of_year = np.array([(FIRST_DAY + dt.timedelta(days=d)).timetuple().tm_yday for d in range(days)], dtype=float)
    lat = np.array([c[2] for c in CITIES])
    elevation = np.array([c[4] for c in CITIES], dtype=float)
    db.executemany("INSERT INTO cities VALUES (?, ?, ?, ?, ?, ?)", [(i + 1, *c) for i, c in enumerate(CITIES)])
    # a seasonal cycle by latitude and elevation, plus day-to-day weather as an AR(1) anomaly (cities x days)
    continental = rng.uniform(0.45, 1.0, n)
    annual_mean = 27.5 - 0.5 * np.maximum(0.0, np.abs(lat) - 15) - 6.5 * elevation / 1000 + rng.normal(0, 1.0, n)
    amplitude = (1.0 + 0.4 * np.maximum(0.0, np.abs(lat) - 8)) * continental
    phase = np.where(lat >= 0, 200, 17)[:, None]  # warmest day of the year
    seasonal = annual_mean[:, None] + amplitude[:, None] * np.cos(2 * np.pi * (day_of_year[None, :] - phase) / 365.25)
    shocks = rng.normal(0, 2.2, (n, days))
    anomaly = np.zeros((n, days))
    for d in range(1, days):
        anomaly[:, d] = 0.7 * anomaly[:, d - 1] + shocks[:, d]
    mean = seasonal + anomaly
    spread = rng.uniform(2.5, 6.0, (n, 1)) + rng.uniform(0, 2.0, (n, days))
    wet = rng.random((n, days)) < rng.uniform(0.15, 0.5, (n, 1))
    amount = np.where(wet, rng.gamma(0.9, 1.0, (n, days)) * rng.uniform(3, 9, (n, 1)), 0.0)
    snowing = mean < 0.5
    columns = [
        np.round(mean + spread / 2, 1),
        np.round(mean - spread / 2, 1),
        np.round(mean, 1),
        np.round(np.where(snowing, 0.0, amount), 1),
        np.round(np.where(snowing, amount * 0.8, 0.0), 1),
        np.clip(rng.lognormal(np.log(rng.uniform(18, 110, (n, 1))), 0.45, (n, days)), 3, 480).astype(int),
    ]
    values = [c.tolist() for c in columns]
    rows = [(i + 1, dates[d], *(v[i][d] for v in values)) for i in range(n) for d in range(days)]
    db.executemany("INSERT INTO daily VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    return db


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """The great-circle distance between two points on the Earth (radius 6371 km), as ``get_distance`` reports it.

    Args:
        lat1: the first point's latitude, in degrees.
        lon1: the first point's longitude, in degrees.
        lat2: the second point's latitude, in degrees.
        lon2: the second point's longitude, in degrees.

    Returns:
        The distance in kilometres.
    """
    r = 6371.0
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * r * math.asin(math.sqrt(a))


def aqi_level(index: int) -> str:
    """The level name of an air-quality index (the first band of ``AQI_LEVELS`` whose upper bound holds it)."""
    return next(label for upper, label in AQI_LEVELS if index <= upper)


def _parse_date(name: str, value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(f"{name} must be a date written YYYY-MM-DD, got {value!r}.") from None


def _range_method(column: str, past: bool) -> Callable[..., dict[str, Any]]:
    """A date-range tool of ``WeatherService`` over one column group (history when ``past``, else forecast):
    the seven such tools differ in nothing else."""

    def tool(self: WeatherService, latitude: float, longitude: float, start_date: str, end_date: str) -> dict[str, Any]:
        return {"daily": self._daily(column, latitude, longitude, *self._span(start_date, end_date, past))}

    return tool


class WeatherService(Service):
    """Open-Meteo-like weather tools over the ``daily`` table; knows the user's today and location."""

    TOOLS = load_tools("weather", max_days=MAX_RANGE_DAYS)
    _COLUMNS = {
        "temp": ("temperature_max", "temperature_min", "temperature_mean"),
        "rain": ("rain_sum",),
        "snow": ("snowfall_sum",),
        "air_quality_index": ("aqi",),
    }

    def __init__(self, db: sqlite3.Connection):
        super().__init__(db)
        self.cities = db.execute(
            "SELECT id, name, country, latitude, longitude, elevation FROM cities ORDER BY id"
        ).fetchall()
        self.today = dt.date(2023, 6, 1)
        self.location = self.cities[0][1]

    def begin(self, today: dt.date, location: str) -> None:
        """A new episode: the user's date and city, which the date and location tools report."""
        self.today, self.location = today, location

    def example_strings(self) -> list[str]:
        """The city names, so random lookups find places."""
        return [c[1] for c in self.cities]

    def example_value(self, param: Param, rng: Any) -> Any:
        """Real coordinates for latitude and longitude and dates near today, else the default."""
        city = self.cities[int(rng.integers(len(self.cities)))]
        if param.name.startswith("latitude"):
            return city[3]
        if param.name.startswith("longitude"):
            return city[4]
        if param.type == "string" and "date" in param.name:
            return (self.today + dt.timedelta(days=int(rng.integers(-20, 10)))).isoformat()
        return super().example_value(param, rng)

    # ---- lookups ------------------------------------------------------------------------------
    def city_at(self, latitude: float, longitude: float) -> tuple[Any, ...]:
        """The city whose data answers a call at these coordinates: the nearest one within 50 km, else the agent's
        error.

        Args:
            latitude: degrees.
            longitude: degrees.

        Returns:
            The city's row (id, name, country, latitude, longitude, elevation).
        """
        best = min(self.cities, key=lambda c: haversine_km(latitude, longitude, c[3], c[4]))
        if haversine_km(latitude, longitude, best[3], best[4]) > 50:
            raise ToolError(
                f"no weather data within 50 km of ({latitude}, {longitude}); look the place up with "
                f"get_latitude_longitude first."
            )
        return best

    def _span(self, start_date: str, end_date: str, history: bool) -> tuple[dt.date, dt.date]:
        start, end = _parse_date("start_date", start_date), _parse_date("end_date", end_date)
        if end < start:
            raise ToolError("end_date is before start_date.")
        if (end - start).days + 1 > MAX_RANGE_DAYS:
            raise ToolError(f"the range is limited to {MAX_RANGE_DAYS} days; split it into shorter ranges.")
        if history:
            if end >= self.today:
                raise ToolError(
                    f"historical data ends yesterday ({self.today - dt.timedelta(days=1)}); today is {self.today}. Use "
                    f"the forecast tools for today and later."
                )
            if start < FIRST_DAY:
                raise ToolError(f"historical data starts on {FIRST_DAY}.")
        else:
            horizon = self.today + dt.timedelta(days=FORECAST_DAYS - 1)
            if start < self.today:
                raise ToolError(f"forecasts start today ({self.today}); use the historical tools for earlier days.")
            if end > horizon:
                raise ToolError(f"forecasts reach {FORECAST_DAYS - 1} days ahead, until {horizon}.")
        return start, end

    def _daily(
        self, kind: str, latitude: float, longitude: float, start: dt.date, end: dt.date
    ) -> list[dict[str, Any]]:
        city = self.city_at(latitude, longitude)
        columns = self._COLUMNS[kind]
        rows = self.db.execute(
            f"SELECT date, {', '.join(columns)} FROM daily WHERE city_id = ? AND date BETWEEN ? AND ? ORDER BY date",
            (city[0], start.isoformat(), end.isoformat()),
        ).fetchall()
        return [dict(zip(("date", *columns), row)) for row in rows]

    def _current(self, kind: str, latitude: float, longitude: float, current_date: str) -> dict[str, Any]:
        if _parse_date("current_date", current_date) != self.today:
            raise ToolError(f"current_date must be today's date; call get_user_current_date (got {current_date}).")
        return self._daily(kind, latitude, longitude, self.today, self.today)[0]

    # ---- tools --------------------------------------------------------------------------------
    def get_user_current_date(self) -> str:
        """The ``get_user_current_date`` tool: get the user's current date (today).

        Returns:
            A string "YYYY-MM-DD".
        """
        return self.today.isoformat()

    def get_user_current_location(self) -> str:
        """The ``get_user_current_location`` tool: get the name of the city the user is in now.

        Returns:
            A string with the city name.
        """
        return self.location

    def get_latitude_longitude(self, name: str) -> dict[str, Any]:
        """The ``get_latitude_longitude`` tool: look up places by name (case-insensitive, part of a name works).

        Args:
            name: the place name, e.g. "Lyon".

        Returns:
            {"results": [{"name", "country", "latitude", "longitude"}, ...]} (empty list if nothing matches).
        """
        needle = name.strip().lower()
        if not needle:
            raise ToolError("get_latitude_longitude: name is empty.")
        hits = [c for c in self.cities if needle in c[1].lower() or c[1].lower() in needle]
        return {"results": [{"name": c[1], "country": c[2], "latitude": c[3], "longitude": c[4]} for c in hits]}

    def get_elevation(self, latitude: float, longitude: float) -> dict[str, Any]:
        """The ``get_elevation`` tool: get the elevation of a location.

        Args:
            latitude: degrees, from get_latitude_longitude.
            longitude: degrees, from get_latitude_longitude.

        Returns:
            {"elevation_m": <metres above sea level>}.
        """
        return {"elevation_m": self.city_at(latitude, longitude)[5]}

    def get_distance(self, latitude1: float, longitude1: float, latitude2: float, longitude2: float) -> dict[str, Any]:
        """The ``get_distance`` tool: great-circle distance between two coordinates.

        Args:
            latitude1: latitude of the first point.
            longitude1: longitude of the first point.
            latitude2: latitude of the second point.
            longitude2: longitude of the second point.

        Returns:
            {"distance_km": <kilometres, 1 decimal>}.
        """
        for value, limit, label in (
            (latitude1, 90, "latitude1"),
            (latitude2, 90, "latitude2"),
            (longitude1, 180, "longitude1"),
            (longitude2, 180, "longitude2"),
        ):
            if abs(value) > limit:
                raise ToolError(f"get_distance: {label} must be between -{limit} and {limit}.")
        return {"distance_km": round(haversine_km(latitude1, longitude1, latitude2, longitude2), 1)}

    #: The date-range tools: history (days before today) and forecast, one per column group.
    get_historical_temp, get_historical_rain, get_historical_snow, get_historical_air_quality_index = (
        _range_method(column, past=True) for column in ("temp", "rain", "snow", "air_quality_index")
    )
    get_temp_forecast, get_rain_forecast, get_snow_forecast = (
        _range_method(column, past=False) for column in ("temp", "rain", "snow")
    )

    def get_current_temp(self, latitude: float, longitude: float, current_date: str) -> dict[str, Any]:
        """The ``get_current_temp`` tool: today's temperatures in °C at a location.

        Args:
            latitude: degrees, from get_latitude_longitude.
            longitude: degrees, from get_latitude_longitude.
            current_date: today's date, YYYY-MM-DD (from get_user_current_date).

        Returns:
            {"date", "temperature_max", "temperature_min", "temperature_mean"}.
        """
        return self._current("temp", latitude, longitude, current_date)

    def get_current_rain(self, latitude: float, longitude: float, current_date: str) -> dict[str, Any]:
        """The ``get_current_rain`` tool: today's rainfall in mm at a location.

        Args:
            latitude: degrees, from get_latitude_longitude.
            longitude: degrees, from get_latitude_longitude.
            current_date: today's date, YYYY-MM-DD (from get_user_current_date).

        Returns:
            {"date", "rain_sum"}.
        """
        return self._current("rain", latitude, longitude, current_date)

    def get_current_snow(self, latitude: float, longitude: float, current_date: str) -> dict[str, Any]:
        """The ``get_current_snow`` tool: today's snowfall in cm at a location.

        Args:
            latitude: degrees, from get_latitude_longitude.
            longitude: degrees, from get_latitude_longitude.
            current_date: today's date, YYYY-MM-DD (from get_user_current_date).

        Returns:
            {"date", "snowfall_sum"}.
        """
        return self._current("snow", latitude, longitude, current_date)

    def get_current_air_quality_index(self, latitude: float, longitude: float, current_date: str) -> dict[str, Any]:
        """The ``get_current_air_quality_index`` tool: today's air-quality index at a location.

        Args:
            latitude: degrees, from get_latitude_longitude.
            longitude: degrees, from get_latitude_longitude.
            current_date: today's date, YYYY-MM-DD (from get_user_current_date).

        Returns:
            {"date", "aqi"}.
        """
        return self._current("air_quality_index", latitude, longitude, current_date)

    def get_air_quality_level(self, air_quality_index: int) -> str:
        """The ``get_air_quality_level`` tool: translate an air-quality index into its level.

        Args:
            air_quality_index: the index value.

        Returns:
            One of "good" (0-50), "fair" (51-100), "moderate" (101-150), "poor" (151-200), "very poor" (201-300),
                "extremely poor" (above 300).
        """
        if air_quality_index < 0:
            raise ToolError("get_air_quality_level: the index cannot be negative.")
        return aqi_level(air_quality_index)


# ---- task generation ---------------------------------------------------------------------------


class _Generator(TaskDraw):
    """Builds the questions; reads the store directly (the expert knows the answers)."""

    s: WeatherService

    def __init__(self, service: WeatherService, rng: np.random.Generator):
        super().__init__(service, rng)
        self.by_name = {c[1]: c for c in service.cities}

    def city(self, exclude: tuple[str, ...] = ()) -> tuple[Any, ...]:
        options = [c for c in self.s.cities if c[1] not in exclude]
        return options[int(self.rng.integers(len(options)))]

    def value(self, city: tuple[Any, ...], day: dt.date, column: str) -> Any:
        return self.s.db.execute(
            f"SELECT {column} FROM daily WHERE city_id = ? AND date = ?", (city[0], day.isoformat())
        ).fetchone()[0]

    def series(self, city: tuple[Any, ...], start: dt.date, end: dt.date, column: str) -> list[Any]:
        rows = self.s.db.execute(
            f"SELECT {column} FROM daily WHERE city_id = ? AND date BETWEEN ? AND ? ORDER BY date",
            (city[0], start.isoformat(), end.isoformat()),
        ).fetchall()
        return [r[0] for r in rows]

    @staticmethod
    def lookup(city: tuple[Any, ...]) -> Step:
        return step(f"I need the coordinates of {city[1]}.", "get_latitude_longitude", name=city[1])

    @staticmethod
    def coords(city: tuple[Any, ...]) -> dict[str, float]:
        return {"latitude": city[3], "longitude": city[4]}

    @staticmethod
    def range_step(thought: str, tool: str, city: tuple[Any, ...], start: dt.date, end: dt.date) -> Step:
        """A call of one of the date-range tools (history or forecast) for ``city``."""
        return step(thought, tool, **_Generator.coords(city), start_date=_d(start), end_date=_d(end))

    def today_step(self) -> Step:
        return step("First I need to know today's date.", "get_user_current_date")


def _d(day: dt.date) -> str:
    return day.isoformat()


def _forecast_max(g: _Generator) -> ToolTask:
    city, ahead = g.city(), int(g.rng.integers(1, 8))
    day = g.s.today + dt.timedelta(days=ahead)
    value = g.value(city, day, "temperature_max")
    when = "tomorrow" if ahead == 1 else f"{ahead} days from today"
    return ToolTask(
        "forecast_max",
        f"What will the maximum temperature in {city[1]} be {when}, in °C?",
        [
            g.today_step(),
            g.lookup(city),
            g.range_step(f"{when} is {_d(day)}; get the temperature forecast.", "get_temp_forecast", city, day, day),
            finish_step(value),
        ],
        Gold(value, "number", tolerance=0.05),
    )


def _historical_average(g: _Generator) -> ToolTask:
    city = g.city()
    length = int(g.rng.integers(3, 11))
    end = g.s.today - dt.timedelta(days=int(g.rng.integers(2, 40)))
    start = end - dt.timedelta(days=length - 1)
    values = g.series(city, start, end, "temperature_mean")
    answer = round(float(np.mean(values)), 2)
    return ToolTask(
        "historical_average",
        f"What was the average of the daily mean temperatures in {city[1]} from {_d(start)} to {_d(end)} (inclusive), "
        f"in °C?",
        [
            g.lookup(city),
            g.range_step("Get the past daily temperatures for that range.", "get_historical_temp", city, start, end),
            finish_step(answer, f"The mean of the {length} daily means is {answer}."),
        ],
        Gold(answer, "number", tolerance=0.06),
    )


def _rainiest_recent_day(g: _Generator) -> ToolTask | None:
    here = g.by_name[g.s.location]
    start, end = g.s.today - dt.timedelta(days=7), g.s.today - dt.timedelta(days=1)
    values = g.series(here, start, end, "rain_sum")
    best = max(values)
    if best <= 0 or values.count(best) > 1:
        return None
    day = start + dt.timedelta(days=values.index(best))
    return ToolTask(
        "rainiest_recent_day",
        "Over the last 7 days (not counting today), on which date did it rain the most where I am? Answer with the "
        "date.",
        [
            g.today_step(),
            step("And where the user is.", "get_user_current_location"),
            g.lookup(here),
            g.range_step("Get the rain of the last seven days.", "get_historical_rain", here, start, end),
            finish_step(_d(day), f"The most rain fell on {_d(day)}."),
        ],
        Gold(_d(day), "text"),
    )


def _snow_days(g: _Generator) -> ToolTask | None:
    cold = [c for c in g.s.cities if abs(c[3]) > 40 or c[5] > 1500]
    city = cold[int(g.rng.integers(len(cold)))]
    months = []
    cursor = dt.date(g.s.today.year - 1, g.s.today.month, 1)
    while cursor < dt.date(g.s.today.year, g.s.today.month, 1):
        if cursor >= FIRST_DAY:
            months.append(cursor)
        cursor = dt.date(cursor.year + cursor.month // 12, cursor.month % 12 + 1, 1)
    g.rng.shuffle(months)
    for first in months:
        last = dt.date(first.year + first.month // 12, first.month % 12 + 1, 1) - dt.timedelta(days=1)
        count = sum(1 for v in g.series(city, first, last, "snowfall_sum") if v > 0)
        if count > 0:
            name = f"{MONTHS[first.month - 1]} {first.year}"
            return ToolTask(
                "snow_days",
                f"On how many days in {name} did it snow in {city[1]}?",
                [
                    g.lookup(city),
                    g.range_step(f"Get the daily snowfall of {name}.", "get_historical_snow", city, first, last),
                    finish_step(count, f"{count} days had snowfall above zero."),
                ],
                Gold(count, "number"),
            )
    return None


def _warmer_tomorrow(g: _Generator) -> ToolTask | None:
    a = g.city()
    b = g.city(exclude=(a[1],))
    day = g.s.today + dt.timedelta(days=1)
    ta, tb = g.value(a, day, "temperature_max"), g.value(b, day, "temperature_max")
    if ta == tb:
        return None
    winner = a[1] if ta > tb else b[1]
    return ToolTask(
        "warmer_tomorrow",
        f"Which city will have the higher maximum temperature tomorrow, {a[1]} or {b[1]}?",
        [
            g.today_step(),
            g.lookup(a),
            g.lookup(b),
            g.range_step(f"Forecast for {a[1]} tomorrow ({_d(day)}).", "get_temp_forecast", a, day, day),
            g.range_step(f"Forecast for {b[1]} tomorrow.", "get_temp_forecast", b, day, day),
            finish_step(winner, f"{a[1]}: {ta} °C, {b[1]}: {tb} °C."),
        ],
        Gold(winner, "text"),
    )


def _air_quality_today(g: _Generator) -> ToolTask:
    city = g.city()
    index = g.value(city, g.s.today, "aqi")
    level = aqi_level(index)
    return ToolTask(
        "air_quality_today",
        f"What is the air-quality level in {city[1]} today?",
        [
            g.today_step(),
            g.lookup(city),
            step(
                "Get today's air-quality index.",
                "get_current_air_quality_index",
                **g.coords(city),
                current_date=_d(g.s.today),
            ),
            step(f"The index is {index}; translate it into a level.", "get_air_quality_level", air_quality_index=index),
            finish_step(level),
        ],
        Gold(level, "text"),
    )


def _distance(g: _Generator) -> ToolTask:
    a = g.city()
    b = g.city(exclude=(a[1],))
    km = round(haversine_km(a[3], a[4], b[3], b[4]), 1)
    return ToolTask(
        "distance",
        f"How far apart are {a[1]} and {b[1]}, in kilometres (rounded to the nearest km)?",
        [
            g.lookup(a),
            g.lookup(b),
            step(
                "Compute the distance between the two points.",
                "get_distance",
                latitude1=a[3],
                longitude1=a[4],
                latitude2=b[3],
                longitude2=b[4],
            ),
            finish_step(round(km), f"{km} km rounds to {round(km)}."),
        ],
        Gold(round(km), "number", tolerance=1.0),
    )


def _rain_next_days(g: _Generator) -> ToolTask:
    city, days = g.city(), int(g.rng.integers(2, 8))
    end = g.s.today + dt.timedelta(days=days - 1)
    total = round(float(sum(g.series(city, g.s.today, end, "rain_sum"))), 1)
    return ToolTask(
        "rain_next_days",
        f"How much rain in total (mm) is forecast in {city[1]} over the next {days} days, counting today?",
        [
            g.today_step(),
            g.lookup(city),
            g.range_step(f"Get the rain forecast from today to {_d(end)}.", "get_rain_forecast", city, g.s.today, end),
            finish_step(total, f"The daily amounts add up to {total} mm."),
        ],
        Gold(total, "number", tolerance=0.06),
    )


def _higher_elevation(g: _Generator) -> ToolTask | None:
    a = g.city()
    b = g.city(exclude=(a[1],))
    if a[5] == b[5]:
        return None
    winner = a[1] if a[5] > b[5] else b[1]
    return ToolTask(
        "higher_elevation",
        f"Which is at a higher elevation, {a[1]} or {b[1]}?",
        [
            g.lookup(a),
            g.lookup(b),
            step(f"Elevation of {a[1]}.", "get_elevation", **g.coords(a)),
            step(f"Elevation of {b[1]}.", "get_elevation", **g.coords(b)),
            finish_step(winner),
        ],
        Gold(winner, "text"),
    )


def _temperature_gap_today(g: _Generator) -> ToolTask:
    a = g.city()
    b = g.city(exclude=(a[1],))
    ta, tb = g.value(a, g.s.today, "temperature_mean"), g.value(b, g.s.today, "temperature_mean")
    gap = round(ta - tb, 1)
    return ToolTask(
        "temperature_gap_today",
        f"By how many °C is today's mean temperature in {a[1]} higher than in {b[1]}? (Negative if it is lower.)",
        [
            g.today_step(),
            g.lookup(a),
            g.lookup(b),
            step(f"Today's temperatures in {a[1]}.", "get_current_temp", **g.coords(a), current_date=_d(g.s.today)),
            step(f"Today's temperatures in {b[1]}.", "get_current_temp", **g.coords(b), current_date=_d(g.s.today)),
            finish_step(gap, f"{ta} - {tb} = {gap}."),
        ],
        Gold(gap, "number", tolerance=0.06),
    )


TEMPLATES = (_forecast_max, _historical_average, _rainiest_recent_day, _snow_days, _warmer_tomorrow, _air_quality_today,
             _distance, _rain_next_days, _higher_elevation, _temperature_gap_today)


def generate(service: WeatherService, local: int) -> ToolTask:
    """Item ``local``: template ``local % 10``; today, location and places drawn from ``local``'s seed."""
    first, span = FIRST_DAY + dt.timedelta(days=400), (LAST_DAY - FIRST_DAY).days - 400 - FORECAST_DAYS

    def attempt(template: Any, rng: np.random.Generator) -> ToolTask | None:
        # a few templates need a unique answer; each attempt redraws the day and places
        today = first + dt.timedelta(days=int(rng.integers(span)))
        location = CITIES[int(rng.integers(len(CITIES)))][0]
        service.begin(today, location)
        task = template(_Generator(service, rng))
        if task is not None:
            task.context = {"today": today.isoformat(), "location": location}
        return task

    return draw_item(WORLD_SEED, local, TEMPLATES, attempt)


class WeatherEnv(SharedWorldEnv):
    """Weather questions answered with Open-Meteo-like tools (history, forecast, air quality)."""

    subtask = "Weather"
    intro, example_call, agentgym_hint = load_env_texts(
        "weather", cities=len(CITIES), first_day=FIRST_DAY, last_day=LAST_DAY, forecast_horizon=FORECAST_DAYS - 1
    )

    service_class = WeatherService
    build_world = world
    generate_task = generate
