"""``AgentGym/Academia-v0``: a citation graph and a co-authorship graph behind graph tools.

Upstream (AgentBoard/AgentGym "academia") loads a DBLP-derived PaperNet and AuthorNet. Here a
seeded generator builds 1,000 papers by 700 authors from 16 organisations: authors write with
colleagues of their own lab most of the time, and papers cite earlier papers with preferential
attachment, so some papers collect many citations. The graphs must be loaded (one tool call
each) before they can be queried, as upstream.
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache
from typing import Any

import numpy as np

from agentgym_envs.tools.answers import Gold
from agentgym_envs.tools.base import SharedWorldEnv, Step, TaskDraw, ToolTask, finish_step, step, template_generator
from agentgym_envs.tools.names import METHODS, ORGANIZATIONS, PAPER_QUALIFIERS, PAPER_TASKS, VENUES, unique_names
from agentgym_envs.tools.toolkit import Service, ToolError, load_env_texts, load_tools, suggest

WORLD_SEED = 7_003
N_PAPERS = 1_000
N_AUTHORS = 700
GRAPHS = ("PaperNet", "AuthorNet")


def _titles(rng: np.random.Generator, count: int) -> list[str]:
    pool = [f"{q} {m} for {t}" for q in PAPER_QUALIFIERS for m in METHODS for t in PAPER_TASKS]
    pool += [f"Towards {q} {t}" for q in PAPER_QUALIFIERS for t in PAPER_TASKS]
    order = rng.permutation(len(pool))[:count]
    return [pool[i] for i in order]


@lru_cache(maxsize=1)
def world() -> sqlite3.Connection:
    """The generated academic world every Academia env shares: papers with venues, years and citations, and their
    authors with organizations (built once per process from ``WORLD_SEED``; read-only).
    """
    rng = np.random.default_rng(WORLD_SEED)
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript("""
        CREATE TABLE authors (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, organization TEXT NOT NULL);
        CREATE TABLE papers (id INTEGER PRIMARY KEY, title TEXT UNIQUE NOT NULL, year INTEGER, venue TEXT);
        CREATE TABLE writes (paper_id INTEGER REFERENCES papers(id), author_id INTEGER REFERENCES authors(id),
                             position INTEGER, PRIMARY KEY (paper_id, author_id));
        CREATE TABLE cites (citing INTEGER REFERENCES papers(id), cited INTEGER REFERENCES papers(id),
                            PRIMARY KEY (citing, cited));
        CREATE INDEX cited_by ON cites(cited);
        CREATE INDEX writes_author ON writes(author_id);
        """)
    names = unique_names(rng, N_AUTHORS)
    org_of = rng.integers(len(ORGANIZATIONS), size=N_AUTHORS)
    db.executemany(
        "INSERT INTO authors VALUES (?, ?, ?)",
        [(i + 1, names[i], ORGANIZATIONS[int(org_of[i])]) for i in range(N_AUTHORS)],
    )
    members = {o: [i + 1 for i in range(N_AUTHORS) if org_of[i] == o] for o in range(len(ORGANIZATIONS))}
    activity = rng.pareto(1.5, N_AUTHORS) + 0.2
    years = np.sort(rng.integers(2005, 2024, size=N_PAPERS))
    citations = np.zeros(N_PAPERS)
    for index, title in enumerate(_titles(rng, N_PAPERS)):
        paper_id = index + 1
        db.execute(
            "INSERT INTO papers VALUES (?, ?, ?, ?)",
            (paper_id, title, int(years[index]), VENUES[int(rng.integers(len(VENUES)))]),
        )
        lead_org = int(rng.integers(len(ORGANIZATIONS)))
        team: list[int] = []
        for _ in range(int(rng.choice([1, 2, 2, 3, 3, 3, 4, 5]))):
            pool = members[lead_org] if rng.random() < 0.8 else list(range(1, N_AUTHORS + 1))
            weights = activity[np.array(pool) - 1]
            author = pool[int(rng.choice(len(pool), p=weights / weights.sum()))]
            if author not in team:
                team.append(author)
        db.executemany("INSERT INTO writes VALUES (?, ?, ?)", [(paper_id, a, k) for k, a in enumerate(team)])
        earlier = np.flatnonzero(years[:index] < years[index])
        if earlier.size:
            weights = citations[earlier] + 1.0
            k = min(int(rng.integers(0, 9)), earlier.size)
            for cited in rng.choice(earlier, size=k, replace=False, p=weights / weights.sum()):
                db.execute("INSERT INTO cites VALUES (?, ?)", (paper_id, int(cited) + 1))
                citations[int(cited)] += 1
    db.commit()
    return db


class AcademiaService(Service):
    """Graph tools over the citation/co-authorship store; the graphs must be loaded first."""

    TOOLS = load_tools("academia")

    def __init__(self, db: sqlite3.Connection):
        super().__init__(db)
        self.loaded: set[str] = set()
        self.titles = {r[1]: r[0] for r in db.execute("SELECT id, title FROM papers")}
        self.names = {r[1]: r[0] for r in db.execute("SELECT id, name FROM authors")}
        self._sizes: dict[str, int] = {}

    def begin(self) -> None:
        """A new episode: neither graph is loaded yet (the agent must load one before using it)."""
        self.loaded = set()

    def example_strings(self) -> list[str]:
        """A few real titles and author names, so the random agent sometimes names a node."""
        return sorted(self.titles)[:5] + sorted(self.names)[:5]

    def _need(self, graph: str) -> None:
        if graph not in self.loaded:
            loader = "load_paper_net" if graph == "PaperNet" else "load_author_net"
            raise ToolError(f"{graph} is not loaded; call {loader} first.")

    def paper(self, node: str) -> int:
        """The id of the paper titled ``node``; the agent's error (with near titles) when PaperNet is not loaded or
        there is no such paper.
        """
        self._need("PaperNet")
        if node not in self.titles:
            raise ToolError(f"there is no paper titled {node!r} in PaperNet.{suggest(node, list(self.titles))}")
        return self.titles[node]

    def author(self, node: str) -> int:
        """The id of the author named ``node``; the agent's error (with near names) when AuthorNet is not loaded or
        there is no such author.
        """
        self._need("AuthorNet")
        if node not in self.names:
            raise ToolError(f"there is no author named {node!r} in AuthorNet.{suggest(node, list(self.names))}")
        return self.names[node]

    def _column(self, sql: str, *args: Any) -> list[Any]:
        return [r[0] for r in self.db.execute(sql, args)]

    # ---- tools --------------------------------------------------------------------------------
    def _edges(self, graph: str) -> int:
        """Edge counts, computed once per service (the co-authorship count is a self-join)."""
        if graph not in self._sizes:
            sql = (
                "SELECT COUNT(*) FROM cites"
                if graph == "PaperNet"
                else "SELECT COUNT(*) FROM (SELECT DISTINCT a.author_id, b.author_id FROM writes a JOIN writes b "
                "ON a.paper_id = b.paper_id AND a.author_id < b.author_id)"
            )
            self._sizes[graph] = self.db.execute(sql).fetchone()[0]
        return self._sizes[graph]

    def load_paper_net(self) -> str:
        """The ``load_paper_net`` tool: load PaperNet, the citation graph (nodes: paper titles; edges: citations).

        Returns:
            A confirmation with the graph's size.
        """
        self.loaded.add("PaperNet")
        return f"PaperNet is loaded: {len(self.titles)} papers, {self._edges('PaperNet')} citation edges."

    def load_author_net(self) -> str:
        """The ``load_author_net`` tool: load AuthorNet, the co-authorship graph (nodes: author names; edges: wrote a
        paper together).

        Returns:
            A confirmation with the graph's size.
        """
        self.loaded.add("AuthorNet")
        return f"AuthorNet is loaded: {len(self.names)} authors, {self._edges('AuthorNet')} co-authorship edges."

    def neighbour_check(self, graph: str, node: str) -> dict[str, Any]:
        """The ``neighbour_check`` tool: list the neighbours of a node. In PaperNet: the papers it cites and the papers
        citing it; in AuthorNet: its co-authors.

        Args:
            graph: which graph. One of "PaperNet", "AuthorNet".
            node: a paper title (PaperNet) or an author name (AuthorNet), exactly as written.

        Returns:
            PaperNet: {"references": [titles], "cited_by": [titles]}; AuthorNet: {"coauthors": [names]}.
        """
        if graph == "PaperNet":
            paper_id = self.paper(node)
            return {
                "references": self._column(
                    "SELECT p.title FROM cites c JOIN papers p ON p.id = c.cited WHERE c.citing = ? ORDER BY p.title",
                    paper_id,
                ),
                "cited_by": self._column(
                    "SELECT p.title FROM cites c JOIN papers p ON p.id = c.citing WHERE c.cited = ? ORDER BY p.title",
                    paper_id,
                ),
            }
        author_id = self.author(node)
        return {"coauthors": self.coauthors(author_id)}

    def coauthors(self, author_id: int) -> list[str]:
        """The names of everyone who wrote a paper with the author, sorted (the AuthorNet neighbours)."""
        return self._column(
            "SELECT DISTINCT x.name FROM writes a JOIN writes b ON a.paper_id = b.paper_id JOIN authors x ON x.id = "
            "b.author_id WHERE a.author_id = ? AND b.author_id != ? ORDER BY x.name",
            author_id,
            author_id,
        )

    def paper_node_check(self, node: str) -> dict[str, Any]:
        """The ``paper_node_check`` tool: get a paper's attributes (needs PaperNet).

        Args:
            node: the paper title.

        Returns:
            {"title", "year", "venue", "authors": [names], "citation_count": <papers in PaperNet citing it>}.
        """
        paper_id = self.paper(node)
        title, year, venue = self.db.execute(
            "SELECT title, year, venue FROM papers WHERE id = ?", (paper_id,)
        ).fetchone()
        authors = self._column(
            "SELECT a.name FROM writes w JOIN authors a ON a.id = w.author_id WHERE w.paper_id = ? ORDER BY w.position",
            paper_id,
        )
        count = self.db.execute("SELECT COUNT(*) FROM cites WHERE cited = ?", (paper_id,)).fetchone()[0]
        return {"title": title, "year": year, "venue": venue, "authors": authors, "citation_count": count}

    def author_node_check(self, node: str) -> dict[str, Any]:
        """The ``author_node_check`` tool: get an author's attributes (needs AuthorNet).

        Args:
            node: the author name.

        Returns:
            {"name", "organization", "papers": [titles]}.
        """
        author_id = self.author(node)
        name, organization = self.db.execute(
            "SELECT name, organization FROM authors WHERE id = ?", (author_id,)
        ).fetchone()
        papers = self._column(
            "SELECT p.title FROM writes w JOIN papers p ON p.id = w.paper_id WHERE w.author_id = ? ORDER BY p.year, "
            "p.title",
            author_id,
        )
        return {"name": name, "organization": organization, "papers": papers}

    def paper_edge_check(self, node1: str, node2: str) -> dict[str, Any]:
        """The ``paper_edge_check`` tool: check the citation edge between two papers (needs PaperNet).

        Args:
            node1: a paper title.
            node2: another paper title.

        Returns:
            {"node1_cites_node2": true/false, "node2_cites_node1": true/false}.
        """
        a, b = self.paper(node1), self.paper(node2)
        edge = "SELECT COUNT(*) FROM cites WHERE citing = ? AND cited = ?"
        return {
            "node1_cites_node2": bool(self.db.execute(edge, (a, b)).fetchone()[0]),
            "node2_cites_node1": bool(self.db.execute(edge, (b, a)).fetchone()[0]),
        }

    def author_edge_check(self, node1: str, node2: str) -> dict[str, Any]:
        """The ``author_edge_check`` tool: get the papers two authors wrote together (needs AuthorNet).

        Args:
            node1: an author name.
            node2: another author name.

        Returns:
            {"papers": [titles]} (empty if they never collaborated).
        """
        a, b = self.author(node1), self.author(node2)
        return {
            "papers": self._column(
                "SELECT p.title FROM writes x JOIN writes y ON x.paper_id = y.paper_id JOIN papers p ON p.id = "
                "x.paper_id WHERE x.author_id = ? AND y.author_id = ? ORDER BY p.title",
                a,
                b,
            )
        }


# ---- task generation ---------------------------------------------------------------------------

LOAD_PAPERS = step("I need the citation graph.", "load_paper_net")
LOAD_AUTHORS = step("I need the co-authorship graph.", "load_author_net")


def _looked_up(template: str, question: str, load: Step, lookup: Step, answer: Any, kind: str = "text") -> ToolTask:
    """A question one lookup answers: load the graph, look up, finish with what it read."""
    return ToolTask(template, question, [load, lookup, finish_step(answer)], Gold(answer, kind))


class _Generator(TaskDraw):
    s: AcademiaService

    def paper_count(self, author_id: int) -> int:
        return self.one("SELECT COUNT(*) FROM writes WHERE author_id = ?", author_id)[0]

    def citation_count(self, paper_id: int) -> int:
        return self.one("SELECT COUNT(*) FROM cites WHERE cited = ?", paper_id)[0]

    def pick_pair(self, sql: str, name_sql: str) -> tuple[tuple[Any, ...], list[str]] | None:
        """A random row of ``sql`` (``None`` when there is none) and the names ``name_sql`` gives its first two ids."""
        row = self.pick(self.all(sql))
        if row is None:
            return None
        return row, [self.one(name_sql, i)[0] for i in row[:2]]


def _coauthors(g: _Generator) -> ToolTask | None:
    row = g.pick(g.all("SELECT id, name FROM authors"))
    names = g.s.coauthors(row[0])
    if not 1 <= len(names) <= 6:
        return None
    lookup = step(f"Co-authors are the neighbours of {row[1]} in AuthorNet.", "neighbour_check", graph="AuthorNet",
                  node=row[1])
    question = f"Who are the co-authors of {row[1]}? List all of them."
    return _looked_up("coauthors", question, LOAD_AUTHORS, lookup, names, "list")


def _collaboration_count(g: _Generator) -> ToolTask | None:
    drawn = g.pick_pair(
        "SELECT a.author_id, b.author_id, COUNT(*) FROM writes a JOIN writes b ON a.paper_id = b.paper_id "
        "AND a.author_id < b.author_id GROUP BY 1, 2",
        "SELECT name FROM authors WHERE id = ?",
    )
    if drawn is None:
        return None
    row, (a, b) = drawn
    lookup = step("The co-authorship edge lists their joint papers.", "author_edge_check", node1=a, node2=b)
    return _looked_up("collaboration_count", f"How many papers have {a} and {b} written together?", LOAD_AUTHORS,
                      lookup, row[2], "number")


def _venue(g: _Generator) -> ToolTask:
    paper_id, title, venue = g.pick(g.all("SELECT id, title, venue FROM papers"))
    lookup = step("The venue is a node attribute.", "paper_node_check", node=title)
    return _looked_up("venue", f"At which venue was the paper '{title}' published?", LOAD_PAPERS, lookup, venue)


def _reference_count(g: _Generator) -> ToolTask | None:
    row = g.pick(g.all("SELECT c.citing, p.title, COUNT(*) FROM cites c JOIN papers p ON p.id = c.citing GROUP BY 1"))
    lookup = step("Its references are among its neighbours.", "neighbour_check", graph="PaperNet", node=row[1])
    return _looked_up("reference_count", f"How many papers in PaperNet does '{row[1]}' cite?", LOAD_PAPERS, lookup,
                      row[2], "number")


def _organization(g: _Generator) -> ToolTask:
    _, name, organization = g.pick(g.all("SELECT id, name, organization FROM authors"))
    lookup = step("The organization is a node attribute.", "author_node_check", node=name)
    return _looked_up("organization", f"Which organization is {name} affiliated with?", LOAD_AUTHORS, lookup,
                      organization)


def _most_prolific_coauthor(g: _Generator) -> ToolTask | None:
    author_id, name = g.pick(g.all("SELECT id, name FROM authors"))
    coauthors = g.s.coauthors(author_id)
    if not 2 <= len(coauthors) <= 5:
        return None
    counts = {c: g.paper_count(g.s.names[c]) for c in coauthors}
    ranked = sorted(counts.values(), reverse=True)
    if ranked[0] == ranked[1]:
        return None
    best = max(counts, key=counts.get)  # type: ignore[arg-type]
    plan: list[Step] = [
        LOAD_AUTHORS,
        step(f"Find the co-authors of {name}.", "neighbour_check", graph="AuthorNet", node=name),
    ]
    plan += [step(f"Count the papers of {c}.", "author_node_check", node=c) for c in coauthors]
    plan.append(finish_step(best, f"{best} has {counts[best]} papers, more than the others."))
    return ToolTask(
        "most_prolific_coauthor", f"Among the co-authors of {name}, who has written the most papers?", plan, Gold(best)
    )


def _cites(g: _Generator) -> ToolTask | None:
    if g.rng.random() < 0.5:
        row = g.pick(
            g.all(
                "SELECT a.title, b.title FROM cites c JOIN papers a ON a.id = c.citing JOIN papers b ON b.id = c.cited"
            )
        )
        answer = True
    else:
        ids = g.rng.choice(N_PAPERS, size=2, replace=False) + 1
        if g.one("SELECT COUNT(*) FROM cites WHERE citing = ? AND cited = ?", int(ids[0]), int(ids[1]))[0]:
            return None
        row = tuple(g.one("SELECT title FROM papers WHERE id = ?", int(i))[0] for i in ids)
        answer = False
    return ToolTask(
        "cites",
        f"Does the paper '{row[0]}' cite '{row[1]}'? Answer yes or no.",
        [
            LOAD_PAPERS,
            step("Check the citation edge.", "paper_edge_check", node1=row[0], node2=row[1]),
            finish_step("yes" if answer else "no"),
        ],
        Gold(answer, "bool"),
    )


def _citation_count(g: _Generator) -> ToolTask:
    paper_id, title = g.pick(g.all("SELECT id, title FROM papers WHERE id IN (SELECT cited FROM cites) OR id % 5 = 0"))
    count = g.citation_count(paper_id)
    lookup = step("The citing papers are among its neighbours.", "neighbour_check", graph="PaperNet", node=title)
    return _looked_up("citation_count", f"How many papers in PaperNet cite '{title}'?", LOAD_PAPERS, lookup, count,
                      "number")


def _shared_author(g: _Generator) -> ToolTask | None:
    drawn = g.pick_pair(
        "SELECT a.paper_id, b.paper_id FROM writes a JOIN writes b ON a.author_id = b.author_id "
        "AND a.paper_id < b.paper_id GROUP BY 1, 2 HAVING COUNT(*) = 1",
        "SELECT title FROM papers WHERE id = ?",
    )
    if drawn is None:
        return None
    row, (t1, t2) = drawn
    name = g.one(
        "SELECT a.name FROM writes x JOIN writes y ON x.author_id = y.author_id JOIN authors a ON a.id = x.author_id "
        "WHERE x.paper_id = ? AND y.paper_id = ?",
        *row,
    )[0]
    return ToolTask(
        "shared_author",
        f"Which author wrote both '{t1}' and '{t2}'?",
        [
            LOAD_PAPERS,
            step("Authors of the first paper.", "paper_node_check", node=t1),
            step("Authors of the second paper.", "paper_node_check", node=t2),
            finish_step(name, f"{name} is on both author lists."),
        ],
        Gold(name),
    )


def _most_cited_paper(g: _Generator) -> ToolTask | None:
    author_id, name = g.pick(
        g.all(
            "SELECT author_id, a.name FROM writes w JOIN authors a ON a.id = w.author_id GROUP BY 1 HAVING COUNT(*) "
            "BETWEEN 2 AND 5"
        )
    )
    papers = g.all(
        "SELECT p.id, p.title FROM writes w JOIN papers p ON p.id = w.paper_id WHERE w.author_id = ? ORDER BY p.year, "
        "p.title",
        author_id,
    )
    counts = {title: g.citation_count(pid) for pid, title in papers}
    ranked = sorted(counts.values(), reverse=True)
    if ranked[0] == ranked[1]:
        return None
    best = max(counts, key=counts.get)  # type: ignore[arg-type]
    plan: list[Step] = [LOAD_AUTHORS, step(f"List the papers of {name}.", "author_node_check", node=name), LOAD_PAPERS]
    plan += [step(f"Citation count of '{t}'.", "paper_node_check", node=t) for _, t in papers]
    plan.append(finish_step(best, f"'{best}' has {counts[best]} citations."))
    return ToolTask("most_cited_paper", f"Which paper by {name} is cited the most within PaperNet?", plan, Gold(best))


TEMPLATES = (_coauthors, _collaboration_count, _venue, _reference_count, _organization, _most_prolific_coauthor,
             _cites, _citation_count, _shared_author, _most_cited_paper)


generate = template_generator(WORLD_SEED, TEMPLATES, _Generator)


class AcademiaEnv(SharedWorldEnv):
    """Questions about papers, authors and citations, answered with graph tools."""

    subtask = "Academia"
    # agentgym_hint: AgentGym's, with our tools' names (its instruction says loadPaperNet, loadAuthorNet)
    intro, example_call, agentgym_hint = load_env_texts("academia")

    service_class = AcademiaService
    build_world = world
    generate_task = generate

    def _open(self, local: int) -> Service:
        service = super()._open(local)
        assert isinstance(service, AcademiaService)
        service.begin()  # every episode starts with no graph loaded
        return service
