"""The generated ``hospital`` database: its schema and its data (its questions: ``questions.json``)."""

from __future__ import annotations

import datetime as dt
import sqlite3

import numpy as np

from agentgym_envs.tools.bird_data.common import dates, pick
from agentgym_envs.tools.names import CITIES, unique_names

SCHEMA = """
CREATE TABLE doctors (
    doctor_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    specialty TEXT NOT NULL,
    hire_date TEXT -- YYYY-MM-DD
);
CREATE TABLE patients (
    patient_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    sex TEXT, -- 'F' or 'M'
    birth_date TEXT, -- YYYY-MM-DD
    city TEXT,
    blood_type TEXT -- e.g. 'A+', 'O-'
);
CREATE TABLE admissions (
    admission_id INTEGER PRIMARY KEY,
    patient_id INTEGER NOT NULL REFERENCES patients(patient_id),
    doctor_id INTEGER NOT NULL REFERENCES doctors(doctor_id),
    admit_date TEXT NOT NULL, -- YYYY-MM-DD
    discharge_date TEXT, -- YYYY-MM-DD
    diagnosis TEXT,
    ward TEXT
);
CREATE TABLE lab_results (
    result_id INTEGER PRIMARY KEY,
    admission_id INTEGER NOT NULL REFERENCES admissions(admission_id),
    test_name TEXT NOT NULL,
    value REAL,
    unit TEXT,
    result_date TEXT -- YYYY-MM-DD
);
"""

DB_ID = "hospital"
SPECIALTIES = ("Cardiology", "Neurology", "Oncology", "Orthopedics", "Pediatrics", "Pulmonology", "Gastroenterology",
               "Endocrinology")
DIAGNOSES = ("pneumonia", "heart failure", "appendicitis", "fracture", "diabetes", "stroke", "asthma", "migraine",
             "gastritis", "sepsis", "bronchitis", "kidney stones")
WARDS = ("Cardiac", "Surgical", "Medical", "Pediatric", "Neuro", "Intensive Care")
TESTS = (("hemoglobin", "g/dL", 13.5, 1.6), ("glucose", "mg/dL", 105, 30), ("creatinine", "mg/dL", 1.0, 0.3),
         ("sodium", "mmol/L", 139, 3.5), ("potassium", "mmol/L", 4.2, 0.5), ("white blood cells", "10^9/L", 8.0, 2.8),
         ("cholesterol", "mg/dL", 190, 38))
BLOOD_TYPES = ("O+", "A+", "B+", "AB+", "O-", "A-", "B-", "AB-")
#: where the patients live
PATIENT_CITIES = tuple(c[0] for c in CITIES[:20])


def build(db: sqlite3.Connection, rng: np.random.Generator) -> None:
    """Create and fill this database's tables from ``rng`` (the same rows for the same seed)."""
    names = unique_names(rng, 4080)
    db.executemany(
        "INSERT INTO doctors VALUES (?, ?, ?, ?)",
        [
            (i + 1, names[i], pick(rng, SPECIALTIES), dates(rng, dt.date(1995, 1, 1), 365 * 27, 1)[0])
            for i in range(80)
        ],
    )
    births = dates(rng, dt.date(1930, 1, 1), 365 * 90, 4000)
    sexes, homes = pick(rng, ("F", "M"), size=4000), pick(rng, PATIENT_CITIES, size=4000)
    blood = pick(rng, BLOOD_TYPES, size=4000, p=[0.37, 0.34, 0.09, 0.04, 0.07, 0.06, 0.02, 0.01])
    db.executemany(
        "INSERT INTO patients VALUES (?, ?, ?, ?, ?, ?)",
        [(i + 1, names[80 + i], sexes[i], births[i], homes[i], blood[i]) for i in range(4000)],
    )
    first_day = dt.date(2018, 1, 1)
    admit_days = rng.integers(0, 365 * 6, 10_000)
    stays = rng.geometric(0.18, 10_000)
    patients, doctors = rng.integers(1, 4001, 10_000), rng.integers(1, 81, 10_000)
    diagnoses, wards = pick(rng, DIAGNOSES, size=10_000), pick(rng, WARDS, size=10_000)
    day = [(first_day + dt.timedelta(days=d)).isoformat() for d in range(365 * 6 + 200)]
    db.executemany(
        "INSERT INTO admissions VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                i + 1,
                int(patients[i]),
                int(doctors[i]),
                day[admit_days[i]],
                day[admit_days[i] + stays[i]],
                diagnoses[i],
                wards[i],
            )
            for i in range(10_000)
        ],
    )
    per_admission = rng.integers(1, 6, 10_000)
    owners = np.repeat(np.arange(10_000), per_admission)
    tests = rng.integers(len(TESTS), size=owners.size)
    offsets = (rng.random(owners.size) * np.maximum(1, stays[owners])).astype(int)
    noise = rng.normal(0, 1, owners.size)
    results = [
        (
            k + 1,
            int(a) + 1,
            TESTS[t][0],
            round(TESTS[t][2] + TESTS[t][3] * float(z), 2),
            TESTS[t][1],
            day[admit_days[a] + o],
        )
        for k, (a, t, o, z) in enumerate(zip(owners.tolist(), tests.tolist(), offsets.tolist(), noise.tolist()))
    ]
    db.executemany("INSERT INTO lab_results VALUES (?, ?, ?, ?, ?, ?)", results)

