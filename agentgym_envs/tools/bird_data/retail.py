"""The generated ``retail_store`` database: its schema and its data (its questions: ``questions.json``)."""

from __future__ import annotations

import datetime as dt
import sqlite3

import numpy as np

from agentgym_envs.tools.bird_data.common import dates, pick
from agentgym_envs.tools.names import CITIES, LAST_NAMES, unique_names

SCHEMA = """
CREATE TABLE categories (
    category_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL
);
CREATE TABLE suppliers (
    supplier_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    country TEXT NOT NULL
);
CREATE TABLE products (
    product_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    category_id INTEGER NOT NULL REFERENCES categories(category_id),
    supplier_id INTEGER NOT NULL REFERENCES suppliers(supplier_id),
    unit_price REAL NOT NULL,
    discontinued INTEGER NOT NULL -- 1 = no longer sold
);
CREATE TABLE customers (
    customer_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    email TEXT,
    city TEXT,
    country TEXT,
    signup_date TEXT, -- YYYY-MM-DD
    segment TEXT -- 'consumer', 'small business' or 'corporate'
);
CREATE TABLE orders (
    order_id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
    order_date TEXT NOT NULL, -- YYYY-MM-DD
    status TEXT NOT NULL, -- 'delivered', 'shipped', 'cancelled' or 'returned'
    shipping_fee REAL
);
CREATE TABLE order_items (
    order_id INTEGER NOT NULL REFERENCES orders(order_id),
    product_id INTEGER NOT NULL REFERENCES products(product_id),
    quantity INTEGER NOT NULL,
    unit_price REAL NOT NULL, -- price paid per unit
    discount REAL NOT NULL, -- fraction, 0.1 = 10% off
    PRIMARY KEY (order_id, product_id)
);
"""

DB_ID = "retail_store"
CATEGORIES = ("Kitchen", "Garden", "Toys", "Books", "Electronics", "Sports", "Beauty", "Office", "Pets", "Music",
              "Outdoor", "Home Decor")
MATERIALS = ("Bamboo", "Steel", "Cotton", "Ceramic", "Oak", "Glass", "Leather", "Wool", "Copper", "Recycled")
ITEMS = ("Bowl", "Lamp", "Bag", "Bottle", "Chair", "Mat", "Basket", "Clock", "Frame", "Mug", "Tray", "Stand", "Box",
         "Brush", "Kit")
QUALIFIERS = ("Classic", "Compact", "Deluxe", "Eco", "Mini", "Pro", "Smart", "Travel", "Vintage", "Ultra")


def build(db: sqlite3.Connection, rng: np.random.Generator) -> None:
    """Fill the tables; the steps draw from ``rng`` in this order."""
    prices = _catalogue(db, rng)
    _customers(db, rng)
    _orders(db, rng, prices)


def _catalogue(db: sqlite3.Connection, rng: np.random.Generator) -> np.ndarray:
    """Categories, suppliers and products; returns the products' unit prices."""
    db.executemany("INSERT INTO categories VALUES (?, ?)", list(enumerate(CATEGORIES, start=1)))
    countries = sorted({c[1] for c in CITIES})
    supplier_names = [
        f"{LAST_NAMES[int(i)]} {pick(rng, ('Trading', 'Imports', 'Goods', 'Supply', 'Partners'))}"
        for i in rng.choice(len(LAST_NAMES), 30, replace=False)
    ]
    db.executemany(
        "INSERT INTO suppliers VALUES (?, ?, ?)",
        [(i + 1, n, pick(rng, countries[:12])) for i, n in enumerate(supplier_names)],
    )
    pool = [f"{a} {m} {t}" for a in QUALIFIERS for m in MATERIALS for t in ITEMS]
    names = [pool[int(i)] for i in rng.choice(len(pool), 400, replace=False)]
    prices = np.round(rng.lognormal(3.2, 0.8, 400), 2)
    db.executemany(
        "INSERT INTO products VALUES (?, ?, ?, ?, ?, ?)",
        [
            (
                i + 1,
                names[i],
                int(rng.integers(1, len(CATEGORIES) + 1)),
                int(rng.integers(1, 31)),
                float(prices[i]),
                int(rng.random() < 0.12),
            )
            for i in range(400)
        ],
    )
    return prices


def _customers(db: sqlite3.Connection, rng: np.random.Generator) -> None:
    cities = [
        c
        for c in CITIES
        if c[1]
        in ("United States", "Canada", "United Kingdom", "Germany", "France", "Australia", "Japan", "Spain", "Italy")
    ]
    people = unique_names(rng, 3000)
    signups = dates(rng, dt.date(2018, 1, 1), 365 * 6, 3000)
    segments = ("consumer", "consumer", "consumer", "small business", "corporate")
    customer_cities, customer_segments = pick(rng, cities, size=3000), pick(rng, segments, size=3000)
    customers = []
    for i in range(3000):
        first, last = people[i].split(" ", 1)
        city = customer_cities[i]
        customers.append(
            (
                i + 1,
                first,
                last,
                f"{first.lower()}.{last.lower()}{i}@example.com",
                city[0],
                city[1],
                signups[i],
                customer_segments[i],
            )
        )
    db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?, ?, ?)", customers)


def _orders(db: sqlite3.Connection, rng: np.random.Generator, prices: np.ndarray) -> None:
    """Orders with a long tail of loyal buyers, and their items at the products' prices."""
    activity = rng.pareto(1.2, 3000) + 0.05
    buyers = rng.choice(3000, size=12000, p=activity / activity.sum()) + 1
    order_dates = dates(rng, dt.date(2019, 1, 1), 365 * 5, 12000)
    statuses = pick(rng, ("delivered", "shipped", "cancelled", "returned"), size=12000, p=[0.72, 0.12, 0.1, 0.06])
    fees = pick(rng, (0.0, 0.0, 4.99, 9.99, 14.5), size=12000)
    db.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
        [(i + 1, int(buyers[i]), order_dates[i], statuses[i], float(fees[i])) for i in range(12000)],
    )
    popularity = rng.pareto(1.0, 400) + 0.1
    candidates = np.array(pick(rng, range(400), size=12000 * 8, p=popularity)).reshape(12000, 8)
    wanted = rng.integers(1, 5, 12000)
    quantities = rng.integers(1, 6, 12000 * 4)
    discounts = pick(rng, (0.0, 0.0, 0.0, 0.05, 0.1, 0.2), size=12000 * 4)
    items = []
    for order_id in range(1, 12001):
        chosen: list[int] = []
        for product in candidates[order_id - 1]:
            if int(product) not in chosen:
                chosen.append(int(product))
            if len(chosen) == wanted[order_id - 1]:
                break
        for product in chosen:
            k = len(items) % len(quantities)
            items.append((order_id, product + 1, int(quantities[k]), float(prices[product]), float(discounts[k])))
    db.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?, ?)", items)

