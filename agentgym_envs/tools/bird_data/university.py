"""The generated ``university`` database: its schema and its data (its questions: ``questions.json``)."""

from __future__ import annotations

import sqlite3

import numpy as np

from agentgym_envs.tools.bird_data.common import pick
from agentgym_envs.tools.names import CITIES, unique_names

SCHEMA = """
CREATE TABLE departments (
    dept_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    building TEXT,
    budget INTEGER
);
CREATE TABLE instructors (
    instructor_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    dept_id INTEGER NOT NULL REFERENCES departments(dept_id),
    salary INTEGER,
    hire_year INTEGER
);
CREATE TABLE courses (
    course_id TEXT PRIMARY KEY, -- e.g. 'PHY-210'
    title TEXT NOT NULL,
    dept_id INTEGER NOT NULL REFERENCES departments(dept_id),
    credits INTEGER,
    level INTEGER -- 100, 200, 300 or 400
);
CREATE TABLE students (
    student_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    major_dept_id INTEGER REFERENCES departments(dept_id),
    enrollment_year INTEGER,
    home_city TEXT
);
CREATE TABLE sections (
    section_id INTEGER PRIMARY KEY,
    course_id TEXT NOT NULL REFERENCES courses(course_id),
    instructor_id INTEGER NOT NULL REFERENCES instructors(instructor_id),
    semester TEXT NOT NULL, -- 'Fall' or 'Spring'
    year INTEGER NOT NULL,
    room TEXT
);
CREATE TABLE enrollments (
    student_id INTEGER NOT NULL REFERENCES students(student_id),
    section_id INTEGER NOT NULL REFERENCES sections(section_id),
    grade TEXT, -- 'A', 'B', 'C', 'D' or 'F'
    PRIMARY KEY (student_id, section_id)
);
"""

DB_ID = "university"
DEPARTMENTS = (("Physics", "PHY"), ("Chemistry", "CHE"), ("Biology", "BIO"), ("Mathematics", "MAT"),
               ("Computer Science", "CSC"), ("History", "HIS"), ("Economics", "ECO"), ("Philosophy", "PHI"),
               ("Linguistics", "LIN"), ("Music", "MUS"), ("Psychology", "PSY"), ("Geology", "GEO"))
TOPICS = ("Foundations", "Methods", "Seminar", "Laboratory", "Theory", "Applications", "Advanced Topics",
          "Research Practice", "Introduction", "Modeling", "Ethics", "History", "Workshop", "Analysis", "Design",
          "Special Topics", "Colloquium", "Field Study", "Computation", "Writing")
DEPARTMENT_NAMES = tuple(name for name, _ in DEPARTMENTS)
BUILDINGS = ("Taylor Hall", "Newton Building", "Curie Center", "Lovelace Hall", "Darwin House", "Hypatia Tower")


def build(db: sqlite3.Connection, rng: np.random.Generator) -> None:
    """Create and fill this database's tables from ``rng`` (the same rows for the same seed)."""
    db.executemany(
        "INSERT INTO departments VALUES (?, ?, ?, ?)",
        [
            (i + 1, name, pick(rng, BUILDINGS), int(rng.integers(20, 200)) * 10_000)
            for i, (name, _) in enumerate(DEPARTMENTS)
        ],
    )
    names = unique_names(rng, 5150)
    db.executemany(
        "INSERT INTO instructors VALUES (?, ?, ?, ?, ?)",
        [
            (
                i + 1,
                names[i],
                int(rng.integers(1, 13)),
                int(rng.integers(55, 190)) * 1000,
                int(rng.integers(1985, 2023)),
            )
            for i in range(150)
        ],
    )
    courses = []
    for dept_id, (name, code) in enumerate(DEPARTMENTS, start=1):
        numbers = sorted(rng.choice(np.arange(100, 500), size=20, replace=False))
        for number, topic in zip(numbers, rng.permutation(TOPICS)):
            level = int(number) // 100 * 100
            courses.append(
                (
                    f"{code}-{int(number)}",
                    f"{name} {topic}" if rng.random() < 0.5 else f"{topic} in {name}",
                    dept_id,
                    int(pick(rng, (2, 3, 3, 4, 4, 5))),
                    level,
                )
            )
    db.executemany("INSERT INTO courses VALUES (?, ?, ?, ?, ?)", courses)
    city_names = [c[0] for c in CITIES]
    db.executemany(
        "INSERT INTO students VALUES (?, ?, ?, ?, ?)",
        [
            (i + 1, names[150 + i], int(rng.integers(1, 13)), int(rng.integers(2015, 2024)), pick(rng, city_names))
            for i in range(5000)
        ],
    )
    instructors_of = {
        d: [r[0] for r in db.execute("SELECT instructor_id FROM instructors WHERE dept_id = ?", (d,))]
        for d in range(1, 13)
    }
    sections = []
    for section_id in range(1, 1501):
        course = courses[int(rng.integers(len(courses)))]
        staff = instructors_of[course[2]] or [1]
        sections.append(
            (
                section_id,
                course[0],
                pick(rng, staff),
                pick(rng, ("Fall", "Spring")),
                int(rng.integers(2016, 2024)),
                f"{pick(rng, BUILDINGS).split()[0]} {int(rng.integers(100, 400))}",
            )
        )
    db.executemany("INSERT INTO sections VALUES (?, ?, ?, ?, ?, ?)", sections)
    pairs = rng.choice(5000 * 1500, size=40_000, replace=False)
    grades = pick(rng, ("A", "B", "C", "D", "F"), size=40_000, p=[0.3, 0.32, 0.22, 0.1, 0.06])
    rows = [(int(pair) // 1500 + 1, int(pair) % 1500 + 1, grade) for pair, grade in zip(pairs, grades)]
    db.executemany("INSERT INTO enrollments VALUES (?, ?, ?)", rows)

