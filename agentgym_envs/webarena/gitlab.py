"""The embedded code-hosting site: WebArena's GitLab in miniature.

Projects with files, commits, issues, merge requests, members and stars; the signed-in user is
byteblaze (as in WebArena). Issues can be opened, closed and reopened, members added, projects
starred and unstarred.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Iterator

from agentgym_envs.webarena.server import Request, SiteApp, redirect, url
from agentgym_envs.webarena.taskgen import Draft, answer_eval, db_eval, q

ME = "byteblaze"
USERS = [ME, "primer", "abisubramanya27", "vinta", "kilian", "yjlou", "convexegg", "jakesgordon", "sindresorhus",
         "mayank-mahajan"]
PROJECTS = [
    ("byteblaze", "a11y-syntax-highlighting", "Accessible syntax highlighting themes"),
    ("byteblaze", "dotfiles", "My configuration files"),
    ("byteblaze", "accessible-html-content-patterns", "Patterns for accessible HTML"),
    ("primer", "design", "Design guidelines and resources"),
    ("vinta", "awesome-python", "A curated list of awesome Python frameworks"),
    ("kilian", "keras-examples", "Examples of deep learning models"),
    ("convexegg", "super_awesome_robot", "Robot control software"),
    ("jakesgordon", "javascript-tetris", "A tetris game in JavaScript"),
    ("sindresorhus", "empathy-prompts", "Prompts for better conversations"),
    ("yjlou", "2019-nCov", "Data tracker"),
]
ROLES = ["Guest", "Reporter", "Developer", "Maintainer"]
VERBS = ["Fix", "Add", "Update", "Refactor", "Remove", "Document"]
THINGS = ["login flow", "README", "color contrast", "unit tests", "build script", "keyboard navigation", "dark theme",
          "API client", "error messages", "dependency versions", "CI pipeline", "search index"]
FILES = ["README.md", "LICENSE", "src/main.py", "src/utils.py", "tests/test_main.py", "docs/index.md", ".gitlab-ci.yml"]


class GitLabSite(SiteApp):
    name = "gitlab"
    title = "GitLab"
    nav = (("Projects", "/"), ("Explore", "/explore"), ("Profile", f"/users/{ME}"))
    PROJECT = "/{namespace:dotted}/{project:dotted}"

    def create_schema(self, db: sqlite3.Connection) -> None:
        """Projects, files, commits, issues, merge requests, members and stars."""
        db.executescript(
            """
            CREATE TABLE projects (id INTEGER PRIMARY KEY, namespace TEXT, name TEXT, description TEXT);
            CREATE TABLE files (project_id INTEGER, path TEXT, content TEXT);
            CREATE TABLE commits (id INTEGER PRIMARY KEY, project_id INTEGER, sha TEXT, author TEXT, message TEXT, \
date TEXT);
            CREATE TABLE issues (id INTEGER PRIMARY KEY, project_id INTEGER, number INTEGER, title TEXT, body TEXT, \
author TEXT,
                state TEXT, label TEXT, date TEXT);
            CREATE TABLE merge_requests (id INTEGER PRIMARY KEY, project_id INTEGER, number INTEGER, title TEXT, \
author TEXT,
                state TEXT, source TEXT, target TEXT);
            CREATE TABLE members (project_id INTEGER, username TEXT, role TEXT);
            CREATE TABLE stars (project_id INTEGER, username TEXT);
            """
        )

    def seed(self, db: sqlite3.Connection) -> None:
        """The projects of ``PROJECTS`` with a seeded draw of files, contributors, commits, issues and merge requests
        (the same site in every process).
        """
        rng = random.Random(42)
        for pid, (namespace, name, description) in enumerate(PROJECTS, start=1):
            db.execute("INSERT INTO projects VALUES (?,?,?,?)", (pid, namespace, name, description))
            for path in FILES[: rng.randint(3, len(FILES))]:
                content = f"# {name}\n\n{description}.\n" if path.endswith(".md") else f"contents of {path}\n"
                db.execute("INSERT INTO files VALUES (?,?,?)", (pid, path, content))
            contributors = [namespace, *rng.sample([u for u in USERS if u != namespace], 3)]
            db.execute("INSERT INTO members VALUES (?,?,?)", (pid, namespace, "Owner"))
            for user in contributors[1:]:
                db.execute("INSERT INTO members VALUES (?,?,?)", (pid, user, rng.choice(ROLES)))
            for index in range(rng.randint(8, 16)):
                date = f"2023-{1 + index * 11 // 16:02d}-{rng.randint(1, 28):02d}"
                db.execute("INSERT INTO commits (project_id, sha, author, message, date) VALUES (?,?,?,?,?)",
                           (pid, f"{rng.getrandbits(32):08x}", rng.choice(contributors),
                            f"{rng.choice(VERBS)} {rng.choice(THINGS)}", date))
            titles = rng.sample(THINGS, 8)
            for number, thing in enumerate(titles, start=1):
                db.execute("INSERT INTO issues (project_id, number, title, body, author, state, label, date) VALUES "
                           "(?,?,?,?,?,?,?,?)",
                           (pid, number, f"{rng.choice(VERBS)} {thing}", f"We should look at the {thing}.",
                            rng.choice(USERS),
                            rng.choice(["opened", "opened", "closed"]), rng.choice(["bug", "feature", "docs"]),
                            f"2023-{number + 2:02d}-{rng.randint(1, 28):02d}"))
            for number in range(1, rng.randint(2, 5)):
                db.execute("INSERT INTO merge_requests (project_id, number, title, author, state, source, target) "
                           "VALUES (?,?,?,?,?,?,?)",
                           (pid, number, f"{rng.choice(VERBS)} {rng.choice(THINGS)}", rng.choice(contributors),
                            rng.choice(["opened", "merged", "closed"]), f"feature-{number}", "main"))
            for user in rng.sample([u for u in USERS if u != ME], rng.randint(0, 6)):
                db.execute("INSERT INTO stars VALUES (?,?)", (pid, user))

    def routes(self):
        """The project pages live under ``/<namespace>/<name>`` (``PROJECT``), as on GitLab."""
        P = self.PROJECT
        return [
            ("GET", "/", self.home), ("GET", "/explore", self.explore), ("GET", "/users/{username:dotted}", self.user),
            ("GET", P, self.project), ("POST", P + "/star", self.star),
            ("GET", P + "/-/blob/{file_path:rest}", self.blob),
            ("GET", P + "/-/commits", self.commits), ("GET", P + "/-/issues", self.issues),
            ("GET", P + "/-/issues/new", self.new_issue),
            ("POST", P + "/-/issues", self.create_issue), ("GET", P + "/-/issues/{number:digits}", self.issue),
            ("POST", P + "/-/issues/{number:digits}/state", self.issue_state),
            ("GET", P + "/-/merge_requests", self.merge_requests),
            ("GET", P + "/-/project_members", self.members), ("POST", P + "/-/project_members", self.add_member),
        ]

    def _project(self, namespace: str, name: str) -> sqlite3.Row:
        return self.one("SELECT * FROM projects WHERE namespace=? AND name=?", (namespace, name))

    def _stars(self, project_id: int) -> int:
        return self.one("SELECT COUNT(*) AS n FROM stars WHERE project_id=?", (project_id,))["n"]

    def _with_stars(self, rows: list[sqlite3.Row]) -> list[tuple[sqlite3.Row, int]]:
        return [(r, self._stars(r["id"])) for r in rows]

    def home(self, request: Request) -> str:
        """``/``: the projects byteblaze is a member of."""
        rows = self.query("SELECT DISTINCT projects.* FROM projects JOIN members ON members.project_id=projects.id "
                          "WHERE username=? ORDER BY projects.id", (ME,))
        return self.render("Your projects", "home", projects=self._with_stars(rows))

    def explore(self, request: Request) -> str:
        """``/explore``: every project, most starred first."""
        rows = sorted(self.query("SELECT * FROM projects"), key=lambda r: (-self._stars(r["id"]), r["id"]))
        return self.render("Explore projects", "explore", projects=self._with_stars(rows))

    def user(self, request: Request, username: str) -> str:
        """``/users/<username>``: a user's commit count and starred projects; an unknown user is a 404."""
        if username not in USERS:
            self.one("SELECT 1 WHERE 0")
        commits = self.one("SELECT COUNT(*) AS n FROM commits WHERE author=?", (username,))["n"]
        starred = self.query("SELECT projects.* FROM stars JOIN projects ON projects.id=project_id WHERE username=? "
                             "ORDER BY projects.id", (username,))
        return self.render(f"User {username}", "user", commits=commits, starred=self._with_stars(starred))

    def project(self, request: Request, namespace: str, name: str) -> str:
        """A project's page: its star count and button, its sections and its files."""
        p = self._project(namespace, name)
        base = f"/{namespace}/{name}"
        starred = bool(self.query("SELECT 1 FROM stars WHERE project_id=? AND username=?", (p["id"], ME)))
        files = self.query("SELECT path FROM files WHERE project_id=? ORDER BY path", (p["id"],))
        sections = [(base + suffix, label) for label, suffix in
                    (("Commits", "/-/commits"), ("Issues", "/-/issues"), ("Merge requests", "/-/merge_requests"),
                     ("Members", "/-/project_members"))]
        return self.render(f"{namespace} / {name}", "project", p=p, base=base, stars=self._stars(p["id"]),
                           starred=starred, sections=sections, files=files)

    def star(self, request: Request, namespace: str, name: str):
        """POST: star the project for byteblaze, or unstar it if it is starred; back to the project."""
        p = self._project(namespace, name)
        if self.query("SELECT 1 FROM stars WHERE project_id=? AND username=?", (p["id"], ME)):
            self.execute("DELETE FROM stars WHERE project_id=? AND username=?", (p["id"], ME))
        else:
            self.execute("INSERT INTO stars VALUES (?,?)", (p["id"], ME))
        return redirect(f"/{namespace}/{name}")

    def blob(self, request: Request, namespace: str, name: str, path: str) -> str:
        """``/-/blob/<path>``: one file of the project."""
        p = self._project(namespace, name)
        f = self.one("SELECT * FROM files WHERE project_id=? AND path=?", (p["id"], path))
        return self.render(path, "blob", content=f["content"])

    def commits(self, request: Request, namespace: str, name: str) -> str:
        """``/-/commits``: the project's commits, newest first, ``?author=`` filtering by author."""
        p = self._project(namespace, name)
        author = request.arg("author")
        rows = self.query("SELECT * FROM commits WHERE project_id=? AND (?='' OR author=?) ORDER BY date DESC, id DESC",
                          (p["id"], author, author))
        authors = sorted({r["author"] for r in self.query("SELECT author FROM commits WHERE project_id=?", (p["id"],))})
        filters = [(url(f"/{namespace}/{name}/-/commits", author=a), a) for a in authors]
        return self.render(f"Commits of {name}", "commits", filters=filters, rows=rows)

    def issues(self, request: Request, namespace: str, name: str) -> str:
        """``/-/issues``: the project's issues, ``?state=`` opened (default), closed or all."""
        p = self._project(namespace, name)
        state = request.arg("state") or "opened"
        rows = self.query("SELECT * FROM issues WHERE project_id=? AND (?='all' OR state=?) ORDER BY number DESC",
                          (p["id"], state, state))
        base = f"/{namespace}/{name}/-/issues"
        tabs = [(url(base, state=s), label) for s, label in (("opened", "Open"), ("closed", "Closed"), ("all", "All"))]
        return self.render(f"Issues of {name}", "issues", base=base, tabs=tabs, rows=rows)

    def new_issue(self, request: Request, namespace: str, name: str) -> str:
        """``/-/issues/new``: the form that opens an issue."""
        self._project(namespace, name)
        return self.render("New Issue", "new_issue", action=f"/{namespace}/{name}/-/issues")

    def create_issue(self, request: Request, namespace: str, name: str):
        """POST ``/-/issues``: open an issue by byteblaze with the form's title (required), description and label; then
        its page.
        """
        p = self._project(namespace, name)
        if not request.arg("title"):
            raise ValueError("the title can't be blank")
        number = self.one("SELECT COALESCE(MAX(number), 0) + 1 AS n FROM issues WHERE project_id=?", (p["id"],))["n"]
        self.execute("INSERT INTO issues (project_id, number, title, body, author, state, label, date) VALUES "
                     "(?,?,?,?,?,?,?,?)",
                     (p["id"], number, request.arg("title"), request.arg("description"), ME, "opened",
                      request.arg("label") or "bug", "2024-01-15"))
        return redirect(f"/{namespace}/{name}/-/issues/{number}")

    def issue(self, request: Request, namespace: str, name: str, number: str) -> str:
        """``/-/issues/<number>``: one issue, with the button that closes or reopens it."""
        p = self._project(namespace, name)
        i = self.one("SELECT * FROM issues WHERE project_id=? AND number=?", (p["id"], int(number)))
        toggle = "Close issue" if i["state"] == "opened" else "Reopen issue"
        return self.render(f"{i['title']} (#{i['number']})", "issue", i=i,
                           action=f"/{namespace}/{name}/-/issues/{number}/state", toggle=toggle)

    def issue_state(self, request: Request, namespace: str, name: str, number: str):
        """POST: close an open issue or reopen a closed one; back to the issue."""
        p = self._project(namespace, name)
        self.execute("UPDATE issues SET state=CASE state WHEN 'opened' THEN 'closed' ELSE 'opened' END WHERE "
                     "project_id=? AND number=?", (p["id"], int(number)))
        return redirect(f"/{namespace}/{name}/-/issues/{number}")

    def merge_requests(self, request: Request, namespace: str, name: str) -> str:
        """``/-/merge_requests``: the project's merge requests, newest first."""
        p = self._project(namespace, name)
        rows = self.query("SELECT * FROM merge_requests WHERE project_id=? ORDER BY number DESC", (p["id"],))
        return self.render(f"Merge requests of {name}", "merge_requests", rows=rows)

    def members(self, request: Request, namespace: str, name: str) -> str:
        """``/-/project_members``: the members and their roles, and the form that invites one."""
        p = self._project(namespace, name)
        rows = self.query("SELECT * FROM members WHERE project_id=? ORDER BY rowid", (p["id"],))
        return self.render(f"Members of {name}", "members", rows=rows, action=f"/{namespace}/{name}/-/project_members",
                           roles=ROLES)

    def add_member(self, request: Request, namespace: str, name: str):
        """POST: make a known user a member with a known role (replacing a membership they had); a bad name or role is a
        400 page.
        """
        p = self._project(namespace, name)
        username, role = request.arg("username"), request.arg("role")
        if username not in USERS or role not in ROLES:
            raise ValueError(f"no user named {username!r}" if username not in USERS else f"unknown role {role!r}")
        self.execute("DELETE FROM members WHERE project_id=? AND username=?", (p["id"], username))
        self.execute("INSERT INTO members VALUES (?,?,?)", (p["id"], username, role))
        return redirect(f"/{namespace}/{name}/-/project_members")


def drafts(db: sqlite3.Connection) -> Iterator[Iterator[Draft]]:
    """The GitLab task templates, drawn from the seeded database: commit counts, opening, starring, inviting, closing
    and counting issues.

    Args:
        db: the seeded database (``GitLabSite.seeded_template()``).

    Returns:
        One iterator of ``Draft`` per template, each with its evaluator and an action sequence that solves it.
    """
    projects = db.execute("SELECT * FROM projects ORDER BY id").fetchall()

    def open_project(p) -> list[str]:
        return [f"click <link {q('Explore')}>", f"click <link {q(f'{p[1]} / {p[2]}')}>"]

    def commit_count() -> Iterator[Draft]:
        for p in projects:
            for (author, n) in db.execute("SELECT author, COUNT(*) FROM commits WHERE project_id=? GROUP BY author "
                                          "ORDER BY author", (p[0],)).fetchall():
                yield Draft("commit_count", f"How many commits did {author} make to the {p[2]} project?", "/",
                            answer_eval("exact_match", str(n)),
                            [*open_project(p), f"click <link {q('Commits')}>", f"click <link {q(author)}>",
                             f"stop [{n}]"])

    def create_issue() -> Iterator[Draft]:
        for index, p in enumerate(projects):
            for thing in THINGS[index % 4:: 4]:
                title = f"Investigate {thing}"
                yield Draft("create_issue", f"Open an issue titled \"{title}\" in the {p[2]} project.", "/",
                            db_eval("gitlab", "SELECT title, state, author FROM issues WHERE project_id=? AND number>8",
                                    [[title, "opened", ME]], [p[0]]),
                            [*open_project(p), f"click <link {q('Issues')}>", f"click <link {q('New issue')}>",
                             f"type <textbox {q('Title')}> [{title}] [0]", f"click <button {q('Create issue')}>",
                             "stop [done]"])

    def star() -> Iterator[Draft]:
        for p in projects:
            yield Draft("star", f"Star the {p[2]} project.", "/",
                        db_eval("gitlab", "SELECT COUNT(*) FROM stars WHERE project_id=? AND username=?", [[1]],
                                [p[0], ME]),
                        [*open_project(p), f"click <button {q('Star')}>", "stop [done]"])

    def add_member() -> Iterator[Draft]:
        for p in projects:
            present = {r[0] for r in db.execute("SELECT username FROM members WHERE project_id=?", (p[0],))}
            for user, role in zip([u for u in USERS if u not in present], ROLES[::-1] * 3, strict=False):
                yield Draft("add_member", f"Add {user} to the {p[2]} project as a {role}.", "/",
                            db_eval("gitlab", "SELECT role FROM members WHERE project_id=? AND username=?", [[role]],
                                    [p[0], user]),
                            [*open_project(p), f"click <link {q('Members')}>",
                             f"type <textbox {q('Username')}> [{user}] [0]",
                             f"type <combobox {q('Role')}> [{role}] [0]", f"click <button {q('Invite')}>",
                             "stop [done]"])

    def open_issues() -> Iterator[Draft]:
        for p in projects[::-1]:
            n = db.execute("SELECT COUNT(*) FROM issues WHERE project_id=? AND state='opened'", (p[0],)).fetchone()[0]
            yield Draft("open_issues", f"How many open issues does the {p[2]} project have?", "/",
                        answer_eval("exact_match", str(n)),
                        [*open_project(p), f"click <link {q('Issues')}>", f"stop [{n}]"])

    def close_issue() -> Iterator[Draft]:
        for p in projects:
            for number, title in db.execute("SELECT number, title FROM issues WHERE project_id=? AND state='opened' "
                                            "ORDER BY number DESC", (p[0],)).fetchall():
                yield Draft("close_issue", f"Close the issue \"{title}\" in the {p[2]} project.", "/",
                            db_eval("gitlab", "SELECT state FROM issues WHERE project_id=? AND number=?", [["closed"]],
                                    [p[0], number]),
                            [*open_project(p), f"click <link {q('Issues')}>", f"click <link {q(title)}>",
                             f"click <button {q('Close issue')}>", "stop [done]"])

    return iter([commit_count(), create_issue(), star(), add_member(), close_issue(), open_issues()])
