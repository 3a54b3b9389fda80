"""The embedded forum: WebArena's Reddit site (Postmill) in miniature.

Forums with posts and comments, up/down votes, user profiles and a submission form; the
signed-in user is MarvelsGrantMan136 (as in WebArena). A vote by the same user on the same
post replaces the previous one, as on Postmill.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Iterator

from agentgym_envs.webarena.server import Request, SiteApp, redirect, url
from agentgym_envs.webarena.taskgen import Draft, answer_eval, db_eval, q

ME = "MarvelsGrantMan136"
USERS = [ME, "Sorin_Markov", "jaja_brooklyn", "BlackIguana", "ziggy_stardust", "PaperPlanes99", "the_bread_guy",
         "NorthernLights"]
FORUMS = {
    "books": ["Just finished {}", "Looking for books like {}", "Is {} worth reading?", "{} book club thread"],
    "movies": ["{} was better than expected", "Rewatching {}", "Underrated: {}", "The ending of {} explained"],
    "technology": ["{} just announced a new laptop", "Thoughts on {}?", "{} privacy update", "Why I switched to {}"],
    "gaming": ["{} speedrun record broken", "Best settings for {}", "{} patch notes", "Is {} still fun in 2023?"],
    "pittsburgh": ["Best coffee near {}", "Traffic on {} again", "{} event this weekend", "Moving to {}: advice?"],
    "DIY": ["Built a {} from scratch", "How do I fix a {}?", "My first {} project", "Cheap {} upgrade"],
}
TOPICS = {
    "books": ["Dune", "Project Hail Mary", "The Hobbit", "Circe", "Educated", "Normal People"],
    "movies": ["Arrival", "Interstellar", "Parasite", "Inception", "Amelie", "Whiplash"],
    "technology": ["Framework", "Linux", "Signal", "Raspberry Pi", "Firefox", "Mastodon"],
    "gaming": ["Celeste", "Hades", "Stardew Valley", "Hollow Knight", "Portal 2", "Minecraft"],
    "pittsburgh": ["Oakland", "Squirrel Hill", "Lawrenceville", "the Strip District", "Shadyside", "Bloomfield"],
    "DIY": ["bookshelf", "leaky faucet", "workbench", "garden bed", "desk lamp", "bike rack"],
}
COMMENTS = ["Great post, thanks for sharing!", "I disagree, but interesting.", "Same here.", "Source?",
            "This made my day.", "Could you elaborate?", "Saving this for later.", "Underrated comment."]


class RedditSite(SiteApp):
    name = "reddit"
    title = "Postmill"
    nav = (("Forums", "/forums"), ("Submit", "/submit"), ("Profile", f"/user/{ME}"))

    def create_schema(self, db: sqlite3.Connection) -> None:
        """Forums, posts, comments and votes (one row per user and post)."""
        db.executescript(
            """
            CREATE TABLE forums (name TEXT PRIMARY KEY, description TEXT);
            CREATE TABLE posts (id INTEGER PRIMARY KEY, forum TEXT, title TEXT, body TEXT, author TEXT, date TEXT);
            CREATE TABLE comments (id INTEGER PRIMARY KEY, post_id INTEGER, author TEXT, body TEXT, date TEXT);
            CREATE TABLE votes (post_id INTEGER, username TEXT, value INTEGER);
            """
        )

    def seed(self, db: sqlite3.Connection) -> None:
        """Each forum's posts from its title templates, with a seeded draw of authors, comments and votes."""
        rng = random.Random(99)
        for forum, templates in FORUMS.items():
            db.execute("INSERT INTO forums VALUES (?,?)", (forum, f"Discussion about {forum}"))
            topics = TOPICS[forum]
            for index, template in enumerate(templates * 2):
                topic = topics[(index * 5 + len(forum)) % len(topics)] if index < 4 else topics[index % len(topics)]
                title = template.format(topic)
                if db.execute("SELECT 1 FROM posts WHERE forum=? AND title=?", (forum, title)).fetchone():
                    continue
                cursor = db.execute("INSERT INTO posts (forum, title, body, author, date) VALUES (?,?,?,?,?)",
                                    (forum, title, f"{title}. What do you all think?", rng.choice(USERS[1:]),
                                     f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"))
                post_id = cursor.lastrowid
                for _ in range(rng.randint(0, 5)):
                    db.execute("INSERT INTO comments (post_id, author, body, date) VALUES (?,?,?,?)",
                               (post_id, rng.choice(USERS[1:]), rng.choice(COMMENTS), "2023-12-01"))
                for user in rng.sample(USERS[1:], rng.randint(0, 7)):
                    db.execute("INSERT INTO votes VALUES (?,?,?)", (post_id, user, rng.choice([1, 1, 1, -1])))

    def routes(self):
        """Postmill's URL shapes: ``/f/<forum>``, ``/f/<forum>/<post id>``, ``/submit``, ``/user/<name>``."""
        return [
            ("GET", "/", self.forums), ("GET", "/forums", self.forums), ("GET", "/f/{forum:word}", self.forum),
            ("GET", "/f/{forum:word}/{post_id:digits}", self.post),
            ("POST", "/f/{forum:word}/{post_id:digits}/comment", self.comment),
            ("POST", "/vote/{post_id:digits}/{direction:vote}", self.vote), ("GET", "/submit", self.submit_form),
            ("POST", "/submit", self.submit), ("GET", "/user/{username:slug}", self.user),
        ]

    def _score(self, post_id: int) -> int:
        return self.one("SELECT COALESCE(SUM(value), 0) AS s FROM votes WHERE post_id=?", (post_id,))["s"]

    def _comment_count(self, post_id: int) -> int:
        return self.one("SELECT COUNT(*) AS n FROM comments WHERE post_id=?", (post_id,))["n"]

    def forums(self, request: Request) -> str:
        """``/`` and ``/forums``: every forum with its post count."""
        rows = self.query("SELECT forums.*, COUNT(posts.id) AS n FROM forums LEFT JOIN posts ON "
                          "posts.forum=forums.name GROUP BY forums.name ORDER BY forums.name")
        return self.render("Forums", "forums", rows=rows)

    def forum(self, request: Request, forum: str) -> str:
        """``/f/<forum>``: its posts with scores and comment counts, ``?sort=`` hot (score plus comments, the
        default), new or top.
        """
        self.one("SELECT 1 FROM forums WHERE name=?", (forum,))
        sort = request.arg("sort") or "hot"
        rows = self.query("SELECT * FROM posts WHERE forum=?", (forum,))
        def hot(r):
            return self._score(r["id"]) + self._comment_count(r["id"]), -r["id"]
        key = {"new": lambda r: (r["date"], r["id"]), "top": lambda r: (self._score(r["id"]), -r["id"])}.get(sort, hot)
        rows = sorted(rows, key=key, reverse=True)
        sorts = [(url(f"/f/{forum}", sort=s), s.title()) for s in ("hot", "new", "top")]
        posts = [(r, self._score(r["id"]), self._comment_count(r["id"])) for r in rows]
        return self.render(f"f/{forum}", "forum", forum=forum, sorts=sorts, posts=posts)

    def post(self, request: Request, forum: str, post_id: str) -> str:
        """``/f/<forum>/<post id>``: the post, its score, the user's own vote, its comments and the reply form."""
        p = self.one("SELECT * FROM posts WHERE id=? AND forum=?", (int(post_id), forum))
        comments = self.query("SELECT * FROM comments WHERE post_id=? ORDER BY id", (p["id"],))
        mine = self.query("SELECT value FROM votes WHERE post_id=? AND username=?", (p["id"], ME))
        vote = mine[0]["value"] if mine else 0
        vote_state = {1: "You upvoted this post.", -1: "You downvoted this post."}.get(vote, "")
        return self.render(p["title"], "post", p=p, forum=forum, score=self._score(p["id"]), vote_state=vote_state,
                           comments=comments)

    def comment(self, request: Request, forum: str, post_id: str):
        """POST: add the user's comment (not empty) to the post; back to the post."""
        if not request.arg("body"):
            raise ValueError("the comment can't be empty")
        self.one("SELECT 1 FROM posts WHERE id=?", (int(post_id),))
        self.execute("INSERT INTO comments (post_id, author, body, date) VALUES (?,?,?,?)",
                     (int(post_id), ME, request.arg("body"), "2024-01-15"))
        return redirect(f"/f/{forum}/{post_id}")

    def vote(self, request: Request, post_id: str, direction: str):
        """POST ``/vote/<post id>/up|down``: the user's vote on the post, replacing an earlier one."""
        p = self.one("SELECT * FROM posts WHERE id=?", (int(post_id),))
        self.execute("DELETE FROM votes WHERE post_id=? AND username=?", (p["id"], ME))
        self.execute("INSERT INTO votes VALUES (?,?,?)", (p["id"], ME, 1 if direction == "up" else -1))
        return redirect(f"/f/{p['forum']}/{p['id']}")

    def submit_form(self, request: Request) -> str:
        """``/submit``: the form that creates a post, ``?forum=`` preselecting a forum."""
        forums = [r["name"] for r in self.query("SELECT name FROM forums ORDER BY name")]
        return self.render("Create submission", "submit_form", forums=forums, selected=request.arg("forum") or None)

    def submit(self, request: Request):
        """POST ``/submit``: create the user's post in an existing forum (the title is required); then its page."""
        forum, title = request.arg("forum"), request.arg("title")
        self.one("SELECT 1 FROM forums WHERE name=?", (forum,))
        if not title:
            raise ValueError("the title can't be blank")
        post_id = self.execute("INSERT INTO posts (forum, title, body, author, date) VALUES (?,?,?,?,?)",
                               (forum, title, request.arg("body"), ME, "2024-01-15"))
        return redirect(f"/f/{forum}/{post_id}")

    def user(self, request: Request, username: str) -> str:
        """``/user/<name>``: a user's posts and comment count; an unknown user is a 404."""
        if username not in USERS:
            self.one("SELECT 1 WHERE 0")
        posts = self.query("SELECT * FROM posts WHERE author=? ORDER BY id", (username,))
        comments = self.one("SELECT COUNT(*) AS n FROM comments WHERE author=?", (username,))["n"]
        return self.render(f"User {username}", "user", posts=posts, comments=comments)

def drafts(db: sqlite3.Connection) -> Iterator[Iterator[Draft]]:
    """The Reddit task templates, drawn from the seeded database: posting, upvoting, replying, and questions about
    scores, comment counts and users' posts.

    Args:
        db: the seeded database (``RedditSite.seeded_template()``).

    Returns:
        One iterator of ``Draft`` per template, each with its evaluator and an action sequence that solves it.
    """
    posts = db.execute("SELECT id, forum, title FROM posts ORDER BY id").fetchall()

    def score(post_id: int) -> int:
        return db.execute("SELECT COALESCE(SUM(value), 0) FROM votes WHERE post_id=?", (post_id,)).fetchone()[0]

    def open_post(p) -> list[str]:
        return [f"click <link {q('Forums')}>", f"click <link {q(p[1])}>", f"click <link {q(p[2])}>"]

    def create_post() -> Iterator[Draft]:
        for forum in FORUMS:
            for topic in TOPICS[forum]:
                title = f"What is your favourite thing about {topic}?"
                yield Draft("create_post", f"Post in the {forum} forum with the title \"{title}\".", "/",
                            db_eval("reddit", "SELECT forum, title, author FROM posts WHERE title=?",
                                    [[forum, title, ME]], [title]),
                            [f"click <link {q('Forums')}>", f"click <link {q(forum)}>",
                             f"click <link {q('Submit a post')}>",
                             f"type <textbox {q('Title')}> [{title}] [0]", f"click <button {q('Create submission')}>",
                             "stop [done]"])

    def upvote() -> Iterator[Draft]:
        for p in posts[::3]:
            yield Draft("upvote", f"Upvote the post \"{p[2]}\" in f/{p[1]}.", "/",
                        db_eval("reddit", "SELECT value FROM votes WHERE post_id=? AND username=?", [[1]], [p[0], ME]),
                        [*open_post(p), f"click <button {q('Upvote')}>", "stop [done]"])

    def reply() -> Iterator[Draft]:
        for index, p in enumerate(posts[1::3]):
            text = COMMENTS[index % len(COMMENTS)]
            yield Draft("reply", f"Reply to the post \"{p[2]}\" with \"{text}\".", "/",
                        db_eval("reddit", "SELECT body FROM comments WHERE post_id=? AND author=?", [[text]],
                                [p[0], ME]),
                        [*open_post(p), f"type <textbox {q('Comment')}> [{text}] [0]",
                         f"click <button {q('Post comment')}>", "stop [done]"])

    def top_post() -> Iterator[Draft]:
        for forum in FORUMS:
            rows = sorted(((score(p[0]), -p[0], p[2]) for p in posts if p[1] == forum), reverse=True)
            yield Draft("top_post", f"What is the title of the highest-scoring post in f/{forum}?", "/",
                        answer_eval("fuzzy_match", [rows[0][2]]),
                        [f"click <link {q('Forums')}>", f"click <link {q(forum)}>", f"click <link {q('Top')}>",
                         f"stop [{rows[0][2]}]"])

    def comment_count() -> Iterator[Draft]:
        for p in posts[2::3]:
            n = db.execute("SELECT COUNT(*) FROM comments WHERE post_id=?", (p[0],)).fetchone()[0]
            yield Draft("comment_count", f"How many comments does the post \"{p[2]}\" in f/{p[1]} have?", "/",
                        answer_eval("exact_match", str(n)), [*open_post(p), f"stop [{n}]"])

    def user_posts() -> Iterator[Draft]:
        for user in USERS[1:]:
            n = db.execute("SELECT COUNT(*) FROM posts WHERE author=?", (user,)).fetchone()[0]
            yield Draft("user_posts", f"How many submissions has the user {user} made?", f"/user/{user}",
                        answer_eval("exact_match", str(n)), [f"stop [{n}]"])

    return iter([create_post(), upvote(), top_post(), reply(), comment_count(), user_posts()])
