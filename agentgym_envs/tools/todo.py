"""``AgentGym/TODOList-v0``: a to-do service (projects, tasks, due dates, completion) in SQLite.

Upstream drives a real Todoist account. Here each item gets its own account: four to six
projects with three to eight tasks each (content, description, due date, priority, expected
duration), and a "today". Questions are graded on the answer; changes (complete, reschedule,
delete, favourite, create) on the final state of every project and task.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from typing import Any, Callable

import numpy as np

from agentgym_envs.tools.answers import Gold
from agentgym_envs.core import Outcome, Start
from agentgym_envs.tools.base import ItemWorldEnv, Step, TaskDraw, ToolTask, draw_store_item, finish_step, step
from agentgym_envs.tools.toolkit import Call, Param, Service, ToolError, load_env_texts, load_tools

WORLD_SEED = 7_005
PROJECTS: dict[str, tuple[str, ...]] = {
    "Work": (
        "Prepare quarterly report",
        "Review pull requests",
        "Update project roadmap",
        "Book meeting room for retro",
        "Write onboarding guide",
        "Reply to vendor emails",
        "Plan team offsite",
        "Fix flaky integration test",
    ),
    "Groceries": (
        "Buy oat milk",
        "Pick up fresh bread",
        "Restock coffee",
        "Get vegetables for soup",
        "Buy birthday cake",
        "Order olive oil",
        "Buy laundry detergent",
    ),
    "Home": (
        "Call the plumber",
        "Replace hallway bulb",
        "Clean the gutters",
        "Pay electricity bill",
        "Assemble bookshelf",
        "Water the plants",
        "Renew home insurance",
        "Sort the garage",
    ),
    "Fitness": (
        "Book yoga class",
        "Run 5 km",
        "Renew gym membership",
        "Buy running shoes",
        "Stretching routine",
        "Swim 20 laps",
        "Plan weekly meals",
    ),
    "Travel": (
        "Renew passport",
        "Book train to the coast",
        "Reserve hotel",
        "Buy travel adapter",
        "Print boarding passes",
        "Arrange pet sitter",
        "Exchange currency",
    ),
    "Reading": (
        "Finish the history book",
        "Return library books",
        "Write book club notes",
        "Order the new novel",
        "Read two chapters",
        "Summarize the essay",
    ),
    "Side Project": (
        "Sketch app wireframes",
        "Set up the database",
        "Write the landing page",
        "Record a demo video",
        "Collect beta feedback",
        "Register the domain",
    ),
    "Family": (
        "Call grandma",
        "Plan the birthday party",
        "Schedule dentist visit",
        "Pick up the kids' photos",
        "Buy school supplies",
        "Organize photo album",
    ),
}
COLORS = ("red", "orange", "yellow", "green", "teal", "blue", "violet", "grey")
DESCRIPTIONS = (
    "Needs to happen before the weekend.",
    "Ask for help if it takes too long.",
    "Check the notes from last time first.",
    "Bring the receipt.",
    "Low effort, just do it.",
    "Coordinate with the team.",
    "Budget is tight this month.",
)
PRIORITY_WORDS = {4: "urgent (priority 4)", 3: "high (priority 3)"}


def create_account(rng: np.random.Generator) -> tuple[sqlite3.Connection, dt.date]:
    """A fresh account for one item and its 'today'."""
    today = dt.date(2024, 1, 1) + dt.timedelta(days=int(rng.integers(0, 330)))
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript("""
        CREATE TABLE projects (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, color TEXT, is_favorite INTEGER NOT \
NULL DEFAULT 0);
        CREATE TABLE tasks (id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES projects(id), content TEXT \
NOT NULL,
                            description TEXT, due_date TEXT, priority INTEGER NOT NULL DEFAULT 1, duration_minutes \
INTEGER,
                            is_completed INTEGER NOT NULL DEFAULT 0);
        """)
    names = [str(n) for n in rng.choice(list(PROJECTS), size=int(rng.integers(4, 7)), replace=False)]
    task_id = int(rng.integers(100, 900)) * 10
    for project_id, name in enumerate(names, start=int(rng.integers(1, 50)) * 100):
        db.execute(
            "INSERT INTO projects VALUES (?, ?, ?, ?)",
            (project_id, name, COLORS[int(rng.integers(len(COLORS)))], int(rng.random() < 0.2)),
        )
        pool = PROJECTS[name]
        for content in rng.choice(pool, size=int(rng.integers(3, min(8, len(pool)) + 1)), replace=False):
            task_id += int(rng.integers(1, 7))
            due = None if rng.random() < 0.15 else (today + dt.timedelta(days=int(rng.integers(-12, 30)))).isoformat()
            db.execute(
                "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                (
                    task_id,
                    project_id,
                    str(content),
                    DESCRIPTIONS[int(rng.integers(len(DESCRIPTIONS)))],
                    due,
                    int(rng.choice([1, 1, 2, 2, 3, 4])),
                    None if rng.random() < 0.2 else int(rng.choice([15, 20, 30, 45, 60, 90, 120])),
                ),
            )
    db.commit()
    return db, today


class TodoService(Service):
    """Todoist-like tools over one account."""

    TOOLS = load_tools("todo")
    WRITE_TOOLS = frozenset({"update_project", "complete_task", "update_task", "delete_task", "create_task"})

    def __init__(self, db: sqlite3.Connection, today: dt.date):
        super().__init__(db)
        self.today = today

    def state(self) -> Any:
        """Projects and tasks without generated ids of new tasks (content compared case-insensitively)."""
        projects = tuple(self.db.execute("SELECT id, name, color, is_favorite FROM projects ORDER BY id"))
        tasks = sorted(
            (project, content.strip().lower(), due or "", priority, completed)
            for project, content, due, priority, completed in self.db.execute(
                "SELECT project_id, content, due_date, priority, is_completed FROM tasks"
            )
        )
        return projects, tuple(tasks)

    def example_strings(self) -> list[str]:
        """Today's date and plausible task and project names, for the random agent's strings."""
        return [self.today.isoformat(), "Buy oat milk", "Work"]

    def example_value(self, param: Param, rng: Any) -> Any:
        """Existing project and task ids and dates near today for the random agent, else the default."""
        if param.name == "project_id":
            ids = [r[0] for r in self.db.execute("SELECT id FROM projects ORDER BY id")]
            return ids[int(rng.integers(len(ids)))]
        if param.name == "task_id":
            ids = [r[0] for r in self.db.execute("SELECT id FROM tasks ORDER BY id")]
            return ids[int(rng.integers(len(ids)))] if ids else 1
        if param.name == "due_date":
            return (self.today + dt.timedelta(days=int(rng.integers(-5, 20)))).isoformat()
        return super().example_value(param, rng)

    def _project(self, project_id: int) -> None:
        if self.db.execute("SELECT 1 FROM projects WHERE id = ?", (project_id,)).fetchone() is None:
            raise ToolError(f"no project with id {project_id}; get_projects lists them.")

    def _task(self, task_id: int, open_only: bool = True) -> tuple[Any, ...]:
        row = self.db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise ToolError(f"no task with id {task_id}; get_tasks lists the tasks of a project.")
        if open_only and row[7]:
            raise ToolError(f"task {task_id} is already completed.")
        return row

    @staticmethod
    def _date(value: str) -> str:
        try:
            return dt.date.fromisoformat(value.strip()).isoformat()
        except ValueError:
            raise ToolError(f"due_date must be a date written YYYY-MM-DD, got {value!r}.") from None

    # ---- tools --------------------------------------------------------------------------------
    def get_user_current_date(self) -> str:
        """The ``get_user_current_date`` tool: get today's date.

        Returns:
            A string "YYYY-MM-DD".
        """
        return self.today.isoformat()

    def get_projects(self) -> list[dict[str, Any]]:
        """The ``get_projects`` tool: list all projects.

        Returns:
            [{"id", "name", "color", "is_favorite"}, ...].
        """
        rows = self.db.execute("SELECT id, name, color, is_favorite FROM projects ORDER BY id").fetchall()
        return [{"id": r[0], "name": r[1], "color": r[2], "is_favorite": bool(r[3])} for r in rows]

    def update_project(self, project_id: int, is_favorite: bool) -> str:
        """The ``update_project`` tool: mark a project as favourite or not.

        Args:
            project_id: the project's id.
            is_favorite: true to favourite it.

        Returns:
            A confirmation.
        """
        self._project(project_id)
        self.db.execute("UPDATE projects SET is_favorite = ? WHERE id = ?", (int(is_favorite), project_id))
        self.db.commit()
        return f"Project {project_id} updated: is_favorite = {str(is_favorite).lower()}."

    def get_tasks(self, project_id: int) -> list[dict[str, Any]]:
        """The ``get_tasks`` tool: list the open (not completed) tasks of a project.

        Args:
            project_id: the project's id.

        Returns:
            [{"id", "content", "due_date" (YYYY-MM-DD or null), "priority" (1 normal ... 4 urgent)}, ...].
        """
        self._project(project_id)
        rows = self.db.execute(
            "SELECT id, content, due_date, priority FROM tasks WHERE project_id = ? AND is_completed = 0 ORDER BY id",
            (project_id,),
        ).fetchall()
        return [{"id": r[0], "content": r[1], "due_date": r[2], "priority": r[3]} for r in rows]

    def get_task_description(self, task_id: int) -> dict[str, Any]:
        """The ``get_task_description`` tool: get a task's description.

        Args:
            task_id: the task's id (from get_tasks).

        Returns:
            {"id", "description"}.
        """
        row = self._task(task_id, open_only=False)
        return {"id": task_id, "description": row[3]}

    def get_task_duration(self, task_id: int) -> dict[str, Any]:
        """The ``get_task_duration`` tool: get a task's expected duration.

        Args:
            task_id: the task's id (from get_tasks).

        Returns:
            {"id", "duration": {"amount", "unit": "minute"} or null}.
        """
        row = self._task(task_id, open_only=False)
        return {"id": task_id, "duration": None if row[6] is None else {"amount": row[6], "unit": "minute"}}

    def complete_task(self, task_id: int) -> str:
        """The ``complete_task`` tool: mark a task as completed (it disappears from get_tasks).

        Args:
            task_id: the task's id (from get_tasks).

        Returns:
            A confirmation.
        """
        self._task(task_id)
        self.db.execute("UPDATE tasks SET is_completed = 1 WHERE id = ?", (task_id,))
        self.db.commit()
        return f"Task {task_id} is completed."

    def update_task(self, task_id: int, due_date: str) -> str:
        """The ``update_task`` tool: change a task's due date.

        Args:
            task_id: the task's id (from get_tasks).
            due_date: the new due date, YYYY-MM-DD.

        Returns:
            A confirmation.
        """
        self._task(task_id)
        self.db.execute("UPDATE tasks SET due_date = ? WHERE id = ?", (self._date(due_date), task_id))
        self.db.commit()
        return f"Task {task_id} is now due {self._date(due_date)}."

    def delete_task(self, task_id: int) -> str:
        """The ``delete_task`` tool: delete a task.

        Args:
            task_id: the task's id (from get_tasks).

        Returns:
            A confirmation.
        """
        self._task(task_id, open_only=False)
        self.db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
        self.db.commit()
        return f"Task {task_id} is deleted."

    def create_task(
        self, project_id: int, content: str, due_date: str | None = None, priority: int = 1
    ) -> dict[str, Any]:
        """The ``create_task`` tool: add a task to a project (priority 1 unless given).

        Args:
            project_id: the project's id.
            content: what to do.
            due_date: due date, YYYY-MM-DD (optional).
            priority: 1 (normal) to 4 (urgent) (optional). One of 1, 2, 3, 4.

        Returns:
            {"id", "content"} of the new task.
        """
        self._project(project_id)
        if not content.strip():
            raise ToolError("content is empty.")
        due = None if due_date is None else self._date(due_date)
        new_id = self.db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM tasks").fetchone()[0]
        self.db.execute(
            "INSERT INTO tasks VALUES (?, ?, ?, '', ?, ?, NULL, 0)",
            (new_id, project_id, content.strip(), due, priority),
        )
        self.db.commit()
        return {"id": new_id, "content": content.strip()}


# ---- task generation ---------------------------------------------------------------------------


class _Generator(TaskDraw):
    s: TodoService

    def __init__(self, service: TodoService, rng: np.random.Generator):
        super().__init__(service, rng)
        self.projects = service.db.execute("SELECT id, name FROM projects ORDER BY id").fetchall()

    def project(self) -> tuple[int, str]:
        return self.projects[int(self.rng.integers(len(self.projects)))]

    def tasks(self, project_id: int) -> list[tuple[Any, ...]]:
        return self.s.db.execute(
            "SELECT id, content, due_date, priority, duration_minutes FROM tasks WHERE project_id = ? ORDER BY id",
            (project_id,),
        ).fetchall()

    def random_task(self, project: tuple[int, str]) -> tuple[Any, ...]:
        """One of the project's tasks, drawn from the item's stream."""
        tasks = self.tasks(project[0])
        return tasks[int(self.rng.integers(len(tasks)))]

    def due_in(self, limit: int, later: str) -> tuple[str, str]:
        """A due date 1 to ``limit - 1`` days ahead, as YYYY-MM-DD and in words ("tomorrow", else ``later``)."""
        ahead = int(self.rng.integers(1, limit))
        return (self.s.today + dt.timedelta(days=ahead)).isoformat(), "tomorrow" if ahead == 1 else later.format(ahead)

    def for_each_task(
        self,
        template: str,
        question: str,
        lead: list[Step],
        tasks: list[tuple[Any, ...]],
        thought: Callable[[tuple[Any, ...]], str],
        tool: str,
        sql: str,
    ) -> ToolTask:
        """A change made task by task: after ``lead``, ``tool`` on each of ``tasks`` (``thought`` says why);
        graded on the state after ``sql``, which ends in ``WHERE id IN``, over their ids."""
        ids = [t[0] for t in tasks]
        plan = lead + [step(thought(t), tool, task_id=t[0]) for t in tasks]
        target = self.target_after(f"{sql} ({', '.join('?' * len(ids))})", *ids)
        return ToolTask(template, question, plan, target=target)

    def find(self, project: tuple[int, str]) -> list[Step]:
        return [
            step("List the projects to find the id.", "get_projects"),
            step(f"List the tasks of '{project[1]}'.", "get_tasks", project_id=project[0]),
        ]

    def today(self) -> Step:
        return step("I need today's date.", "get_user_current_date")

    def target_after(self, sql: str, *args: Any) -> Any:
        """The state after applying a change on a scratch copy of the account."""
        scratch = sqlite3.connect(":memory:")
        self.s.db.backup(scratch)
        scratch.execute(sql, args)
        state = TodoService(scratch, self.s.today).state()
        scratch.close()
        return state


def _earliest_due(g: _Generator) -> ToolTask | None:
    project = g.project()
    dated = [t for t in g.tasks(project[0]) if t[2]]
    if not dated:
        return None
    first = min(dated, key=lambda t: t[2])
    if sum(1 for t in dated if t[2] == first[2]) > 1:
        return None
    return ToolTask(
        "earliest_due",
        f"Which task in my '{project[1]}' project is due the earliest? Answer with the task's name.",
        [*g.find(project), finish_step(first[1], f"'{first[1]}' is due {first[2]}, before the others.")],
        Gold(first[1]),
    )


def _overdue_count(g: _Generator) -> ToolTask:
    project = g.project()
    today = g.s.today.isoformat()
    count = sum(1 for t in g.tasks(project[0]) if t[2] and t[2] < today)
    return ToolTask(
        "overdue_count",
        f"How many tasks in my '{project[1]}' project are overdue (due before today)?",
        [g.today(), *g.find(project), finish_step(count, f"{count} due dates are before {today}.")],
        Gold(count, "number"),
    )


def _duration(g: _Generator) -> ToolTask | None:
    project = g.project()
    timed = [t for t in g.tasks(project[0]) if t[4] is not None]
    task = g.pick(timed)
    if task is None:
        return None
    return ToolTask(
        "duration",
        f"How many minutes is the task '{task[1]}' in my '{project[1]}' project expected to take?",
        [
            *g.find(project),
            step(f"Its id is {task[0]}; get its duration.", "get_task_duration", task_id=task[0]),
            finish_step(task[4]),
        ],
        Gold(task[4], "number"),
    )


def _complete_named(g: _Generator) -> ToolTask:
    project = g.project()
    task = g.random_task(project)
    return ToolTask(
        "complete_named",
        f"Mark the task '{task[1]}' in my '{project[1]}' project as done.",
        [*g.find(project), step(f"Its id is {task[0]}.", "complete_task", task_id=task[0])],
        target=g.target_after("UPDATE tasks SET is_completed = 1 WHERE id = ?", task[0]),
    )


def _reschedule(g: _Generator) -> ToolTask:
    project = g.project()
    task = g.random_task(project)
    new_due, when = g.due_in(15, "{} days from today")
    return ToolTask(
        "reschedule",
        f"Move the due date of '{task[1]}' in my '{project[1]}' project to {when}.",
        [g.today(), *g.find(project), step(f"{when} is {new_due}.", "update_task", task_id=task[0], due_date=new_due)],
        target=g.target_after("UPDATE tasks SET due_date = ? WHERE id = ?", new_due, task[0]),
    )


def _delete_overdue(g: _Generator) -> ToolTask | None:
    project = g.project()
    today = g.s.today.isoformat()
    overdue = [t for t in g.tasks(project[0]) if t[2] and t[2] < today]
    if not overdue:
        return None
    return g.for_each_task(
        "delete_overdue",
        f"Delete every overdue task (due before today) in my '{project[1]}' project.",
        [g.today(), *g.find(project)],
        overdue,
        lambda t: f"'{t[1]}' was due {t[2]}; delete it.",
        "delete_task",
        "DELETE FROM tasks WHERE id IN",
    )


def _favorite(g: _Generator) -> ToolTask | None:
    candidates = [
        p
        for p in g.projects
        if not g.s.db.execute("SELECT is_favorite FROM projects WHERE id = ?", (p[0],)).fetchone()[0]
    ]
    project = g.pick(candidates)
    if project is None:
        return None
    return ToolTask(
        "favorite",
        f"Add my '{project[1]}' project to my favourites.",
        [
            step("List the projects to find the id.", "get_projects"),
            step(f"'{project[1]}' has id {project[0]}.", "update_project", project_id=project[0], is_favorite=True),
        ],
        target=g.target_after("UPDATE projects SET is_favorite = 1 WHERE id = ?", project[0]),
    )


def _create(g: _Generator) -> ToolTask:
    project = g.project()
    existing = {t[1] for t in g.tasks(project[0])}
    options = [c for name in PROJECTS for c in PROJECTS[name] if c not in existing]
    content = options[int(g.rng.integers(len(options)))]
    due, when = g.due_in(10, "in {} days")
    return ToolTask(
        "create",
        f"Add a task '{content}' to my '{project[1]}' project, due {when} (normal priority).",
        [
            g.today(),
            step("List the projects to find the id.", "get_projects"),
            step(f"{when} is {due}.", "create_task", project_id=project[0], content=content, due_date=due),
        ],
        target=g.target_after("INSERT INTO tasks VALUES (1000000, ?, ?, '', ?, 1, NULL, 0)", project[0], content, due),
    )


def _busiest_project(g: _Generator) -> ToolTask | None:
    counts = {name: len(g.tasks(pid)) for pid, name in g.projects}
    ranked = sorted(counts.values(), reverse=True)
    if ranked[0] == ranked[1]:
        return None
    best = max(counts, key=counts.get)  # type: ignore[arg-type]
    plan = [step("List the projects.", "get_projects")]
    plan += [step(f"Count the open tasks of '{name}'.", "get_tasks", project_id=pid) for pid, name in g.projects]
    plan.append(finish_step(best, f"'{best}' has {counts[best]} open tasks, the most."))
    return ToolTask("busiest_project", "Which of my projects has the most open tasks?", plan, Gold(best))


def _complete_urgent(g: _Generator) -> ToolTask | None:
    project = g.project()
    level = int(g.rng.choice([3, 4]))
    chosen = [t for t in g.tasks(project[0]) if t[3] == level]
    if not chosen:
        return None
    return g.for_each_task(
        "complete_urgent",
        f"Complete every task in my '{project[1]}' project whose priority is {PRIORITY_WORDS[level]}.",
        [*g.find(project)],
        chosen,
        lambda t: f"'{t[1]}' has priority {level}; complete it.",
        "complete_task",
        "UPDATE tasks SET is_completed = 1 WHERE id IN",
    )


TEMPLATES = (_earliest_due, _overdue_count, _duration, _complete_named, _reschedule, _delete_overdue, _favorite,
             _create, _busiest_project, _complete_urgent)


def generate(local: int) -> tuple[TodoService, ToolTask]:
    """The account and task of item ``local``; the task's context is the account's today."""

    def make(rng: np.random.Generator) -> tuple[TodoService, _Generator]:
        service = TodoService(*create_account(rng))
        return service, _Generator(service, rng)

    return draw_store_item(
        WORLD_SEED, local, TEMPLATES, make, lambda service: {"today": service.today.isoformat()}, TodoService.close
    )


class TodoEnv(ItemWorldEnv):
    """To-do list questions and changes over a per-item Todoist-like account.

    By default graded as AgentGym's TODO server grades: the episode ends on an action containing "finish"; it is won
    when the subgoal was met (a change: ``finish`` answered exactly "done"; a question: the gold answer, from
    ``finish`` or a tool's result) and, at that step, the whole to-do state equals the target (a question: the
    state it started in). ``detailed_instruction=True``: a change is won as soon as the data is right, a question on
    its answer alone.
    """

    subtask = "TODOList"
    stateful = True
    intro, example_call, agentgym_hint = load_env_texts("todo")
    _ends_when_state_reached = False  # AgentGym: graded at finish

    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        start = super()._start(item_id, rng)
        self._initial_state = self.service.state()
        return start

    def _finish_meets_subgoal(self, answer: Any) -> bool:
        """AgentGym's TODO subgoal: the gold answer for a question, the answer "done" for a change."""
        if self.current is not None and self.current.gold is None:
            return answer == "done"
        return super()._finish_meets_subgoal(answer)

    def _agentgym_outcome(self, text: str, ends: bool, valid: bool = True,
                          info: dict[str, Any] | None = None, parsed: bool = True) -> Outcome:
        """Nothing is won before the episode ends; at its end, the subgoal and the whole state decide."""
        if not ends:
            return Outcome(text, valid=valid, info=info or {})
        task = self.current
        target = task.target if task.gold is None else self._initial_state
        won = self._reached >= 1.0 and self.service.state() == target
        return Outcome(text, progress=float(won), score=float(won), done=True, success=won, valid=valid,
                       info=info or {})

    def oracle_action(self) -> str:
        """The expert's next call; by default a change's plan ends with ``finish`` answering "done" (AgentGym grades
        at ``finish``)."""
        if (not self.detailed_instruction and self.current is not None and not self._diverged
                and self._cursor >= len(self.current.plan) and self.current.plan[-1].call.tool != "finish"):
            return f"Thought: The changes are made.\n\nAction: {self._render(Call('finish', {}))}"
        return super().oracle_action()

    def _render(self, call: Call) -> str:
        """AgentGym's ``finish`` of a change answers "done"."""
        if not self.detailed_instruction and call.tool == "finish" and "answer" not in call.arguments:
            call = Call("finish", {"answer": "done"})
        return super()._render(call)

    def _open_item(self, local: int) -> tuple[TodoService, ToolTask]:
        return generate(local)

    def _replan(self) -> list[Step]:
        """From the current state: redo the changes still missing, in the order the expert would."""
        assert isinstance(self.service, TodoService) and self.current is not None
        remaining = [s for s in self.current.plan[self._cursor :]]
        if not self.current.changes_state:
            return remaining
        writes = [s for s in self.current.plan if s.call.tool in TodoService.WRITE_TOOLS]
        todo = []
        for s in writes:
            if s.call.tool == "create_task":
                existing = {
                    r[0].strip().lower()
                    for r in self.service.db.execute(
                        "SELECT content FROM tasks WHERE project_id = ?", (s.call.arguments["project_id"],)
                    )
                }
                if s.call.arguments["content"].lower() in existing:
                    continue
            elif "task_id" in s.call.arguments:
                row = self.service.db.execute(
                    "SELECT is_completed, due_date FROM tasks WHERE id = ?", (s.call.arguments["task_id"],)
                ).fetchone()
                if (
                    row is None
                    or (s.call.tool == "complete_task" and row[0])
                    or (s.call.tool == "update_task" and row[1] == s.call.arguments["due_date"])
                ):
                    continue
            todo.append(s)
        return todo + [finish_step()]
