"""The embedded map: WebArena's Maps site (OpenStreetMap) in miniature.

Places of Pittsburgh with addresses and coordinates, a search, place pages listing the nearest
places, and directions between two places by car, bike or foot with a distance and a travel
time. Distances are great-circle distances times a per-mode detour factor; times follow from a
per-mode average speed, so every answer is a deterministic function of the seeded coordinates.
"""

from __future__ import annotations

import math
import sqlite3
from typing import Iterator

from agentgym_envs.webarena.server import Request, SiteApp, url
from agentgym_envs.webarena.taskgen import Draft, answer_eval, q, url_eval

PLACES = [
    ("Carnegie Mellon University", "university", "5000 Forbes Avenue, Pittsburgh, PA 15213", 40.4433, -79.9436),
    ("University of Pittsburgh", "university", "4200 Fifth Avenue, Pittsburgh, PA 15260", 40.4443, -79.9608),
    ("Duquesne University", "university", "600 Forbes Avenue, Pittsburgh, PA 15282", 40.4365, -79.9906),
    ("Phipps Conservatory", "garden", "1 Schenley Drive, Pittsburgh, PA 15213", 40.4390, -79.9470),
    ("Carnegie Museum of Natural History", "museum", "4400 Forbes Avenue, Pittsburgh, PA 15213", 40.4433, -79.9497),
    ("The Andy Warhol Museum", "museum", "117 Sandusky Street, Pittsburgh, PA 15212", 40.4482, -80.0025),
    ("Carnegie Science Center", "museum", "1 Allegheny Avenue, Pittsburgh, PA 15212", 40.4454, -80.0182),
    ("PNC Park", "stadium", "115 Federal Street, Pittsburgh, PA 15212", 40.4469, -80.0057),
    ("Acrisure Stadium", "stadium", "100 Art Rooney Avenue, Pittsburgh, PA 15212", 40.4468, -80.0158),
    ("PPG Paints Arena", "stadium", "1001 Fifth Avenue, Pittsburgh, PA 15219", 40.4395, -79.9892),
    ("Point State Park", "park", "601 Commonwealth Place, Pittsburgh, PA 15222", 40.4416, -80.0086),
    ("Schenley Park", "park", "101 Panther Hollow Road, Pittsburgh, PA 15213", 40.4347, -79.9425),
    ("Frick Park", "park", "6750 Forbes Avenue, Pittsburgh, PA 15217", 40.4330, -79.9050),
    ("Pittsburgh Zoo", "zoo", "7370 Baker Street, Pittsburgh, PA 15206", 40.4846, -79.9190),
    ("Duquesne Incline", "attraction", "1197 West Carson Street, Pittsburgh, PA 15219", 40.4389, -80.0179),
    ("Monongahela Incline", "attraction", "8 Grandview Avenue, Pittsburgh, PA 15211", 40.4311, -80.0066),
    ("Heinz Hall", "theater", "600 Penn Avenue, Pittsburgh, PA 15222", 40.4425, -80.0004),
    ("Pittsburgh International Airport", "airport", "1000 Airport Boulevard, Pittsburgh, PA 15231", 40.4915, -80.2329),
    ("Union Station", "station", "1100 Liberty Avenue, Pittsburgh, PA 15222", 40.4453, -79.9925),
    ("UPMC Presbyterian", "hospital", "200 Lothrop Street, Pittsburgh, PA 15213", 40.4420, -79.9606),
    ("Allegheny General Hospital", "hospital", "320 East North Avenue, Pittsburgh, PA 15212", 40.4571, -80.0032),
    ("Carnegie Library of Pittsburgh", "library", "4400 Forbes Avenue, Pittsburgh, PA 15213", 40.4424, -79.9500),
    ("Strip District Market", "market", "2100 Smallman Street, Pittsburgh, PA 15222", 40.4520, -79.9841),
    ("Market Square", "square", "1 Market Square, Pittsburgh, PA 15222", 40.4406, -80.0025),
    ("Kennywood Park", "attraction", "4800 Kennywood Boulevard, West Mifflin, PA 15122", 40.3873, -79.8648),
    ("Cathedral of Learning", "university", "4200 Fifth Avenue, Pittsburgh, PA 15260", 40.4443, -79.9532),
    ("Heinz History Center", "museum", "1212 Smallman Street, Pittsburgh, PA 15222", 40.4468, -79.9920),
    ("Randyland", "attraction", "1501 Arch Street, Pittsburgh, PA 15212", 40.4566, -80.0092),
    ("South Side Works", "market", "2700 Sidney Street, Pittsburgh, PA 15203", 40.4273, -79.9650),
    ("Highland Park", "park", "151 Lake Drive, Pittsburgh, PA 15206", 40.4806, -79.9128),
]
#: mode -> (detour factor over the great-circle distance, average speed in km/h)
MODES = {"car": (1.35, 32.0), "bike": (1.25, 14.0), "foot": (1.2, 4.8)}


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """The great-circle distance between two points on the Earth (radius 6371 km).

    Args:
        lat1: the first point's latitude, in degrees.
        lon1: the first point's longitude, in degrees.
        lat2: the second point's latitude, in degrees.
        lon2: the second point's longitude, in degrees.

    Returns:
        The distance in kilometres.
    """
    p1, p2, dp, dl = map(math.radians, (lat1, lat2, lat2 - lat1, lon2 - lon1))
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 6371.0 * 2 * math.asin(math.sqrt(a))


def route(a: sqlite3.Row | tuple, b: sqlite3.Row | tuple, mode: str) -> tuple[str, str]:
    """(distance text, duration text) of the route from place ``a`` to ``b`` by ``mode``."""
    factor, speed = MODES[mode]
    km = round(haversine_km(a[3], a[4], b[3], b[4]) * factor, 1)
    minutes = max(1, round(km / speed * 60))
    duration = f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
    return f"{km:.1f} km", duration


class MapsSite(SiteApp):
    name = "map"
    title = "OpenStreetMap"
    nav = (("Search", "/"), ("Directions", "/directions"))

    def create_schema(self, db: sqlite3.Connection) -> None:
        """One table: the places, with their kind, address and coordinates."""
        db.execute("CREATE TABLE places (id INTEGER PRIMARY KEY, name TEXT, kind TEXT, address TEXT, "
                   "lat REAL, lon REAL)")

    def seed(self, db: sqlite3.Connection) -> None:
        """The Pittsburgh places of ``PLACES``."""
        db.executemany("INSERT INTO places (name, kind, address, lat, lon) VALUES (?,?,?,?,?)", PLACES)

    def routes(self):
        """OpenStreetMap's pages: search, a place, and directions."""
        return [("GET", "/", self.home), ("GET", "/search", self.search),
                ("GET", "/place/{place_id:digits}", self.place), ("GET", "/directions", self.directions)]

    def _find(self, text: str) -> sqlite3.Row | None:
        rows = self.query("SELECT id, name, kind, lat, lon, address FROM places ORDER BY id")
        exact = [r for r in rows if r["name"].lower() == text.lower().strip()]
        partial = [r for r in rows if text.lower().strip() and text.lower().strip() in r["name"].lower()]
        return (exact or partial or [None])[0]

    def home(self, request: Request) -> str:
        """``/``: the search box."""
        return self.render("OpenStreetMap", "home")

    def search(self, request: Request) -> str:
        """``/search?q=``: the places whose name, address or kind holds the query, by name."""
        term = request.arg("q")
        rows = self.query("SELECT * FROM places WHERE ?<>'' AND (name LIKE ? OR address LIKE ? OR kind LIKE ?) "
                          "ORDER BY name", (term, f"%{term}%", f"%{term}%", f"%{term}%"))
        return self.render("Search Results", "search", term=term, rows=rows)

    def place(self, request: Request, place_id: str) -> str:
        """``/place/<id>``: a place, its coordinates and the five nearest other places."""
        p = self.one("SELECT id, name, kind, lat, lon, address FROM places WHERE id=?", (int(place_id),))
        others = self.query("SELECT id, name, kind, lat, lon, address FROM places WHERE id<>?", (p["id"],))
        nearest = sorted(others, key=lambda o: (haversine_km(p["lat"], p["lon"], o["lat"], o["lon"]), o["name"]))[:5]
        rows = [(o, f"{haversine_km(p['lat'], p['lon'], o['lat'], o['lon']):.2f} km") for o in nearest]
        return self.render(p["name"], "place", p=p, nearest=rows)

    def directions(self, request: Request) -> str:
        """``/directions?from=&to=&mode=``: the route between two places named (exactly, else by a part of the name)
        by car, bike or foot; an unknown mode is a 400 page, an unknown place is named on the page.
        """
        source, target, mode = request.arg("from"), request.arg("to"), request.arg("mode") or "car"
        if mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}")
        missing, found = None, None
        if source or target:
            a, b = self._find(source), self._find(target)
            if a is None or b is None:
                missing = source if a is None else target
            else:
                distance, duration = route((a["id"], a["name"], a["kind"], a["lat"], a["lon"]),
                                           (b["id"], b["name"], b["kind"], b["lat"], b["lon"]), mode)
                found = (a["name"], b["name"], mode, distance, duration)
        return self.render("Directions", "directions", source=source, target=target, mode=mode, modes=list(MODES),
                           missing=missing, route=found)


def drafts(db: sqlite3.Connection) -> Iterator[Iterator[Draft]]:
    """The map task templates over the seeded places: coordinates, drive times, walking distances, addresses, the URL of
    a bike route and the nearest place of a kind.

    Args:
        db: the seeded database (``MapsSite.seeded_template()``).

    Returns:
        One iterator of ``Draft`` per template, each with its evaluator and an action sequence that solves it.
    """
    places = db.execute("SELECT id, name, kind, lat, lon, address FROM places ORDER BY id").fetchall()
    pairs = [(places[i], places[(i * 7 + 3) % len(places)]) for i in range(len(places))
             if i != (i * 7 + 3) % len(places)]

    def directions_steps(a, b, mode: str) -> list[str]:
        steps = [f"click <link {q('Directions')}>", f"type <textbox {q('From')}> [{a[1]}] [0]",
                 f"type <textbox {q('To')}> [{b[1]}] [0]"]
        if mode != "car":
            steps.append(f"click <radio {q(mode)}>")
        return [*steps, f"click <button {q('Go')}>"]

    def coordinates() -> Iterator[Draft]:
        for p in places:
            yield Draft("coordinates", f"What are the coordinates of {p[1]} (latitude, longitude)?", "/",
                        answer_eval("must_include", [f"{p[3]:.4f}", f"{p[4]:.4f}"]),
                        [f"type <searchbox {q('Search places')}> [{p[1]}] [1]", f"click <link {q(p[1])}>",
                         f"stop [{p[3]:.4f}, {p[4]:.4f}]"])

    def drive_time() -> Iterator[Draft]:
        for a, b in pairs:
            _, duration = route(a, b, "car")
            yield Draft("drive_time", f"How long does it take to drive from {a[1]} to {b[1]}?", "/",
                        answer_eval("must_include", [duration]), [*directions_steps(a, b, "car"), f"stop [{duration}]"])

    def walk_distance() -> Iterator[Draft]:
        for a, b in pairs[::-1]:
            distance, _ = route(a, b, "foot")
            yield Draft("walk_distance", f"What is the walking distance from {a[1]} to {b[1]}?", "/",
                        answer_eval("must_include", [distance]),
                        [*directions_steps(a, b, "foot"), f"stop [{distance}]"])

    def address() -> Iterator[Draft]:
        for p in places[::-1]:
            yield Draft("address", f"What is the address of {p[1]}?", "/", answer_eval("fuzzy_match", [p[5]]),
                        [f"type <searchbox {q('Search places')}> [{p[1]}] [1]", f"stop [{p[5]}]"])

    def bike_url() -> Iterator[Draft]:
        for a, b in pairs[3:]:
            yield Draft("bike_url", f"Show me the bike route from {a[1]} to {b[1]}.", "/",
                        url_eval(url("__MAP__/directions", **{"from": a[1], "to": b[1], "mode": "bike"})),
                        [*directions_steps(a, b, "bike"), "stop [done]"])

    def nearest() -> Iterator[Draft]:
        for p in places[5:]:
            near = min((o for o in places if o[0] != p[0]), key=lambda o: (haversine_km(p[3], p[4], o[3], o[4]), o[1]))
            yield Draft("nearest", f"Which place is closest to {p[1]} in straight-line distance?", "/",
                        answer_eval("fuzzy_match", [near[1]]),
                        [f"type <searchbox {q('Search places')}> [{p[1]}] [1]", f"click <link {q(p[1])}>",
                         f"stop [{near[1]}]"])

    return iter([coordinates(), drive_time(), address(), walk_distance(), bike_url(), nearest()])
