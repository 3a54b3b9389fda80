"""The embedded "One Stop Market": WebArena's Shopping site (Magento storefront) in miniature.

A catalogue with categories, search, product pages with options and reviews, a cart, a checkout
and the order history of the signed-in customer (Emma Lopez, as in WebArena). The shop admin
(``shopping_admin.py``) reuses this schema and seed generator with its own seed.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from typing import Callable, Iterator

from agentgym_envs.webarena.server import NotFound, Request, SiteApp, redirect, url
from agentgym_envs.webarena.taskgen import Draft, answer_eval, db_eval, html_eval, q, seeded_shuffle, url_eval

CATEGORIES = {
    "Kitchen": (["Ceramic Mug", "Chef Knife", "Cutting Board", "Tea Kettle", "Frying Pan", "Salad Bowl"], None),
    "Electronics": (["Bluetooth Speaker", "USB-C Charger", "Wireless Mouse", "Headphones", "Webcam", "Power Bank"],
                    None),
    "Clothing": (["Rain Jacket", "Wool Sweater", "Running Shorts", "Cotton T-Shirt", "Denim Jeans", "Hoodie"],
                 ["S", "M", "L", "XL"]),
    "Beauty": (["Face Cream", "Lip Balm", "Shampoo", "Hand Lotion", "Sunscreen", "Body Wash"], None),
    "Sports": (["Yoga Mat", "Water Bottle", "Tennis Racket", "Jump Rope", "Dumbbell Set", "Bike Helmet"],
               ["S", "M", "L"]),
    "Grocery": (["Green Tea", "Olive Oil", "Dark Chocolate", "Honey Jar", "Coffee Beans", "Almond Butter"], None),
}
BRANDS = ["Acme", "Nordic", "Luma", "Zenith", "Harbor", "Maple", "Orion", "Summit", "Willow", "Vertex"]
COLORS = ["Black", "Blue", "Red", "Green", "White", "Gray"]
REVIEWERS = ["Sarah Miller", "John Smith", "Ava Chen", "Liam Brown", "Noah Davis", "Mia Wilson", "Ethan Moore",
             "Olivia Taylor"]
REVIEW_TEXTS = {5: "Excellent, exactly as described.", 4: "Good value, would buy again.",
                3: "It is okay for the price.", 2: "Quality could be better.", 1: "Broke after a week, disappointed."}
STATUSES = ["Complete", "Complete", "Complete", "Canceled", "Pending", "Processing"]
CUSTOMER_NAMES = ["Emma Lopez", "Grace Nguyen", "Alex Martin", "Lily Potter", "Jane Doe", "Bob Jones", "Julia Kim",
                  "Adam Garcia", "Sophia Young", "Daniel Clark", "Ava Rossi", "Samuel Park"]
STREETS = ["Oak Street", "Maple Avenue", "Pine Road", "Cedar Lane", "Elm Drive", "Lake View", "Hill Street"]
CITIES = ["Pittsburgh, PA", "Boston, MA", "Austin, TX", "Denver, CO", "Seattle, WA"]


def create_shop_schema(db: sqlite3.Connection) -> None:
    """The shop's tables (products, customers, reviews, orders and their items, the cart), shared by the storefront and
    the admin site.

    Args:
        db: an empty database.
    """
    db.executescript(
        """
        CREATE TABLE products (id INTEGER PRIMARY KEY, sku TEXT, name TEXT, category TEXT, price REAL,
            description TEXT, sizes TEXT, colors TEXT, quantity INTEGER, status TEXT);
        CREATE TABLE reviews (id INTEGER PRIMARY KEY, product_id INTEGER, author TEXT, rating INTEGER, text TEXT, date \
TEXT);
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT, phone TEXT, address TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, date TEXT, status TEXT, total REAL, address \
TEXT);
        CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER, product_id INTEGER, qty INTEGER, price \
REAL, size TEXT, color TEXT);
        CREATE TABLE cart (id INTEGER PRIMARY KEY, product_id INTEGER, qty INTEGER, size TEXT, color TEXT);
        """
    )


def seed_shop(db: sqlite3.Connection, seed: int, customers: int, orders: int) -> None:
    """A deterministic catalogue, reviews, customers and order history (same ``seed`` = same rows)."""
    rng = random.Random(seed)
    names: set[str] = set()
    product_id = 0
    for category, (nouns, sizes) in CATEGORIES.items():
        for noun in nouns:
            for _ in range(2):
                brand = rng.choice(BRANDS)
                while f"{brand} {noun}" in names:
                    brand = rng.choice(BRANDS)
                names.add(f"{brand} {noun}")
                product_id += 1
                price = round(rng.uniform(4, 120), 0) - 0.01
                colors = ",".join(sorted(rng.sample(COLORS, 3)))
                db.execute(
                    "INSERT INTO products VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (product_id, f"{category[:3].upper()}-{1000 + product_id}", f"{brand} {noun}", category, price,
                     f"The {brand} {noun.lower()} is a {rng.choice(['durable', 'lightweight', 'classic', 'compact'])} "
                     f"{category.lower()} item.", ",".join(sizes or []), colors, rng.randint(0, 150), "Enabled"),
                )
                for _ in range(rng.choice([0, 1, 2, 2, 3, 4, 5])):
                    rating = rng.choice([1, 2, 3, 4, 4, 5, 5, 5])
                    db.execute(
                        "INSERT INTO reviews (product_id, author, rating, text, date) VALUES (?,?,?,?,?)",
                        (product_id, rng.choice(REVIEWERS), rating, REVIEW_TEXTS[rating],
                         f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"),
                    )
    for index, name in enumerate(CUSTOMER_NAMES[:customers], start=1):
        first, last = name.lower().split()
        db.execute(
            "INSERT INTO customers VALUES (?,?,?,?,?)",
            (index, name, f"{first}.{last}@example.com", f"412-555-{1000 + index * 37:04d}",
             f"{rng.randint(10, 999)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"),
        )
    for order_id in range(1, orders + 1):
        customer = 1 if customers == 1 else rng.randint(1, customers)
        date = f"{rng.choice([2022, 2023])}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        total = 0.0
        for pid in rng.sample(range(1, product_id + 1), rng.randint(1, 3)):
            qty = rng.randint(1, 3)
            price, sizes, colors = db.execute("SELECT price, sizes, colors FROM products WHERE id=?", (pid,)).fetchone()
            size = rng.choice(sizes.split(",")) if sizes else ""
            db.execute("INSERT INTO order_items (order_id, product_id, qty, price, size, color) VALUES (?,?,?,?,?,?)",
                       (order_id, pid, qty, price, size, rng.choice(colors.split(","))))
            total += qty * price
        address = db.execute("SELECT address FROM customers WHERE id=?", (customer,)).fetchone()[0]
        db.execute("INSERT INTO orders VALUES (?,?,?,?,?,?)",
                   (order_id, customer, date, rng.choice(STATUSES), round(total, 2), address))


def slug(text: str) -> str:
    """A category name as its URL part: lower case, spaces as dashes."""
    return text.lower().replace(" ", "-")


class ShoppingSite(SiteApp):
    name = "shopping"
    title = "One Stop Market"
    nav = (("Home", "/"), ("My Cart", "/cart"), ("My Orders", "/orders"), ("My Account", "/account"))
    CUSTOMER_ID = 1
    SEED_ORDERS = 14

    def create_schema(self, db: sqlite3.Connection) -> None:
        """The shop's tables (``create_shop_schema``)."""
        create_shop_schema(db)

    def seed(self, db: sqlite3.Connection) -> None:
        """The storefront's catalogue, one customer (the signed-in one) and their order history."""
        seed_shop(db, seed=7, customers=1, orders=self.SEED_ORDERS)

    def routes(self):
        """The storefront's pages: catalogue, search, product, cart, checkout, orders and account."""
        return [
            ("GET", "/", self.home), ("GET", "/search", self.search),
            ("GET", "/category/{category_slug:slug}", self.category),
            ("GET", "/product/{product_id:digits}", self.product), ("POST", "/cart/add", self.cart_add),
            ("GET", "/cart", self.cart),
            ("POST", "/cart/remove/{product_id:digits}", self.cart_remove), ("GET", "/checkout", self.checkout),
            ("POST", "/checkout", self.place_order), ("GET", "/orders", self.orders),
            ("GET", "/orders/{order_id:digits}", self.order),
            ("GET", "/account", self.account), ("POST", "/account", self.save_account),
        ]

    def home(self, request: Request) -> str:
        """``/``: the category links."""
        return self.render("Welcome to One Stop Market", "home", categories=[(slug(c), c) for c in CATEGORIES])

    def search(self, request: Request) -> str:
        """``/search?q=``: the enabled products whose name or category holds every word of the query."""
        term = request.arg("q")
        words = term.lower().split()
        rows = [r for r in self.query("SELECT * FROM products WHERE status='Enabled' ORDER BY id")
                if words and all(w in (r["name"] + " " + r["category"]).lower() for w in words)]
        return self.render(f"Search results for: '{term}'", "search", term=term, rows=rows)

    def category(self, request: Request, category_slug: str) -> str:
        """``/category/<slug>``: a category's enabled products, ``?sort=`` price_asc, price_desc or by name."""
        names = {slug(c): c for c in CATEGORIES}
        if category_slug not in names:
            raise NotFound(category_slug)
        order = {"price_asc": "price ASC", "price_desc": "price DESC"}.get(request.arg("sort"), "name ASC")
        rows = self.query(f"SELECT * FROM products WHERE category=? AND status='Enabled' ORDER BY {order}",
                          (names[category_slug],))
        sorts = [(url(f"/category/{category_slug}", sort=key), label) for key, label in
                 (("price_asc", "Price: low to high"), ("price_desc", "Price: high to low"), ("", "Name"))]
        return self.render(names[category_slug], "category", sorts=sorts, rows=rows)

    def product(self, request: Request, product_id: str) -> str:
        """``/product/<id>``: a product, its options, its reviews and their average rating."""
        p = self.one("SELECT * FROM products WHERE id=?", (int(product_id),))
        reviews = self.query("SELECT * FROM reviews WHERE product_id=? ORDER BY id", (p["id"],))
        average = f"{sum(r['rating'] for r in reviews) / len(reviews):.1f} out of 5" if reviews else "no rating yet"
        return self.render(p["name"], "product", p=p, reviews=reviews, average=average)

    def cart_add(self, request: Request):
        """POST ``/cart/add``: put the product in the cart (a product with sizes first asks for one; a quantity below
        1 is a 400 page); then the cart.
        """
        product = self.one("SELECT * FROM products WHERE id=?", (int(request.arg("product_id")),))
        size, color = request.arg("size"), request.arg("color")
        qty = int(request.arg("qty") or 1)
        if product["sizes"] and not size:
            return self.render(product["name"], "choose_size", p=product)
        if qty < 1:
            raise ValueError("quantity must be at least 1")
        self.execute("INSERT INTO cart (product_id, qty, size, color) VALUES (?,?,?,?)",
                     (product["id"], qty, size, color or product["colors"].split(",")[0]))
        return redirect("/cart")

    def cart(self, request: Request) -> str:
        """``/cart``: the cart's rows and their total."""
        rows = self.query("SELECT cart.*, products.name, products.price FROM cart JOIN products ON "
                          "products.id=product_id ORDER BY cart.id")
        return self.render("Shopping Cart", "cart", rows=rows, total=sum(r["price"] * r["qty"] for r in rows))

    def cart_remove(self, request: Request, row_id: str):
        """POST ``/cart/remove/<row>``: take one row out of the cart; back to the cart."""
        self.execute("DELETE FROM cart WHERE id=?", (int(row_id),))
        return redirect("/cart")

    def checkout(self, request: Request) -> str:
        """``/checkout``: the checkout form, the customer's address filled in."""
        address = self.one("SELECT address FROM customers WHERE id=?", (self.CUSTOMER_ID,))["address"]
        return self.render("Checkout", "checkout", address=address, empty=not self.query("SELECT * FROM cart"))

    def place_order(self, request: Request):
        """POST ``/checkout``: turn the cart into a pending order (Express shipping adds $5) and empty the cart; then
        the order's page. An empty cart goes back to the cart.
        """
        rows = self.query("SELECT cart.*, products.price FROM cart JOIN products ON products.id=product_id ORDER BY "
                          "cart.id")
        if not rows:
            return redirect("/cart")
        shipping = 5.0 if request.arg("shipping") == "Express" else 0.0
        total = round(sum(r["price"] * r["qty"] for r in rows) + shipping, 2)
        order_id = self.execute("INSERT INTO orders (customer_id, date, status, total, address) VALUES (?,?,?,?,?)",
                                (self.CUSTOMER_ID, "2024-01-15", "Pending", total, request.arg("address")))
        for r in rows:
            self.execute("INSERT INTO order_items (order_id, product_id, qty, price, size, color) VALUES (?,?,?,?,?,?)",
                         (order_id, r["product_id"], r["qty"], r["price"], r["size"], r["color"]))
        self.execute("DELETE FROM cart")
        return redirect(f"/orders/{order_id}")

    def orders(self, request: Request) -> str:
        """``/orders``: the customer's orders, newest first."""
        rows = self.query("SELECT * FROM orders WHERE customer_id=? ORDER BY id DESC", (self.CUSTOMER_ID,))
        return self.render("My Orders", "orders", rows=rows)

    def order(self, request: Request, order_id: str) -> str:
        """``/orders/<id>``: one of the customer's orders and its items (someone else's is a 404)."""
        o = self.one("SELECT * FROM orders WHERE id=? AND customer_id=?", (int(order_id), self.CUSTOMER_ID))
        items = self.query("SELECT order_items.*, products.name FROM order_items JOIN products ON "
                           "products.id=product_id WHERE order_id=?", (o["id"],))
        return self.render(f"Order # {o['id']:06d}", "order", o=o, items=items)

    def account(self, request: Request) -> str:
        """``/account``: the customer's details in an editable form."""
        return self.render("My Account", "account",
                           c=self.one("SELECT * FROM customers WHERE id=?", (self.CUSTOMER_ID,)))

    def save_account(self, request: Request):
        """POST ``/account``: save the customer's name, email and address; back to the account."""
        self.execute("UPDATE customers SET name=?, email=?, address=? WHERE id=?",
                     (request.arg("name"), request.arg("email"), request.arg("address"), self.CUSTOMER_ID))
        return redirect("/account")


# ---- tasks ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShopTaskData:
    """The seeded storefront rows every task template draws from, read once so all templates see the same rows."""

    db: sqlite3.Connection
    orders: list[sqlite3.Row]
    shuffled: list[sqlite3.Row]  # the products in the fixed task order (seed 11)


def _search_steps(name: str) -> list[str]:
    return [f"type <searchbox {q('Search the store')}> [{name}] [1]", f"click <link {q(name)}>"]


def _price_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """A product's price, read off its page after a search: the simplest lookup."""
    for p in shop.shuffled:
        yield Draft("price", f"What is the price of the {p['name']}?", "/",
                    answer_eval("must_include", [f"{p['price']:.2f}"]),
                    [*_search_steps(p["name"]), f"stop [${p['price']:.2f}]"])


def _review_count_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """How many reviews a product has: counting rows on a page (products in reverse task order)."""
    for p in shop.shuffled[::-1]:
        count = shop.db.execute("SELECT COUNT(*) FROM reviews WHERE product_id=?", (p["id"],)).fetchone()[0]
        yield Draft("review_count", f"How many reviews does the {p['name']} have?", "/",
                    answer_eval("exact_match", str(count)), [*_search_steps(p["name"]), f"stop [{count}]"])


def _order_total_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """An order's grand total: navigating the order history to one order's page."""
    for o in shop.orders:
        label = f"View order {o['id']:06d}"
        yield Draft("order_total", f"What was the grand total of my order number {o['id']:06d}?", "/",
                    answer_eval("must_include", [f"{o['total']:,.2f}"]),
                    [f"click <link {q('My Orders')}>", f"click <link {q(label)}>", f"stop [${o['total']:,.2f}]"])


def _order_status_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """An order's status, found by its date in the order list (orders newest first)."""
    for o in shop.orders[::-1]:
        yield Draft("order_status", f"What is the status of my order placed on {o['date']}?", "/",
                    answer_eval("exact_match", o["status"]),
                    [f"click <link {q('My Orders')}>", f"stop [{o['status']}]"])


def _cheapest_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """The cheapest product of a category: using the category page's sort."""
    for category in CATEGORIES:
        p = shop.db.execute("SELECT * FROM products WHERE category=? ORDER BY price, id LIMIT 1",
                            (category,)).fetchone()
        yield Draft("cheapest", f"What is the cheapest product in the {category} category?", "/",
                    answer_eval("fuzzy_match", [p["name"]]),
                    [f"click <link {q(category)}>", f"click <link {q('Price: low to high')}>",
                     f"stop [{p['name']}]"])


def _add_to_cart_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """Put a sized product in the cart: a state change that needs an option chosen (products with sizes only)."""
    for p in shop.shuffled:
        if not p["sizes"]:
            continue
        size = p["sizes"].split(",")[p["id"] % len(p["sizes"].split(","))]
        yield Draft("add_to_cart", f"Add the {p['name']} in size {size} to my shopping cart.", "/",
                    db_eval("shopping", "SELECT product_id, size, qty FROM cart ORDER BY id", [[p["id"], size, 1]]),
                    [*_search_steps(p["name"]), f"click <radio {q(size)}>", f"click <button {q('Add to Cart')}>",
                     "stop [done]"])


def _buy_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """Buy several units of a product: the longest flow, search to placed order (products without sizes)."""
    for p in shop.shuffled[5:]:
        if p["sizes"]:
            continue
        qty = 2 + p["id"] % 3
        yield Draft("buy", f"Buy {qty} units of the {p['name']} (any color) with flat rate shipping.", "/",
                    db_eval("shopping", "SELECT product_id, qty FROM order_items WHERE order_id > ?",
                            [[p["id"], qty]], [ShoppingSite.SEED_ORDERS]),
                    [*_search_steps(p["name"]), f"type <spinbutton {q('Qty')}> [{qty}] [0]",
                     f"click <button {q('Add to Cart')}>",
                     f"click <link {q('Proceed to Checkout')}>", f"click <button {q('Place Order')}>",
                     "stop [done]"])


def _search_url_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """Show a search's results: checked by the final URL rather than an answer."""
    for noun in [n for nouns, _ in CATEGORIES.values() for n in nouns]:
        term = noun.lower()
        yield Draft("search_url", f"Show me the search results for '{term}' in the store.", "/",
                    url_eval(url("__SHOPPING__/search", q=term)),
                    [f"type <searchbox {q('Search the store')}> [{term}] [1]", "stop [done]"])


def _address_drafts(shop: ShopTaskData) -> Iterator[Draft]:
    """Change the account's address to a new one (from seed 5): checked on the rendered account form."""
    rng_address = random.Random(5)
    for _ in range(40):
        new = f"{rng_address.randint(10, 999)} {rng_address.choice(STREETS)}, {rng_address.choice(CITIES)}"
        yield Draft("address", f"Change the address in my account to \"{new}\".", "/",
                    html_eval("__SHOPPING__/account", "document.querySelector('#f-address').value",
                              {"exact_match": new}),
                    [f"click <link {q('My Account')}>", f"type <textbox {q('Address')}> [{new}] [0]",
                     f"click <button {q('Save')}>", "stop [done]"])


#: The storefront's task templates, in the order the catalog takes drafts round-robin from them.
SHOP_TEMPLATES: tuple[Callable[[ShopTaskData], Iterator[Draft]], ...] = (
    _price_drafts, _order_total_drafts, _add_to_cart_drafts, _cheapest_drafts, _buy_drafts, _review_count_drafts,
    _search_url_drafts, _order_status_drafts, _address_drafts,
)


def drafts(db: sqlite3.Connection) -> Iterator[Iterator[Draft]]:
    """Task templates over the seeded shop; each yields one draft per instance, in a fixed order."""
    db.row_factory = sqlite3.Row
    products = db.execute("SELECT * FROM products ORDER BY id").fetchall()
    orders = db.execute("SELECT * FROM orders ORDER BY id").fetchall()
    shop = ShopTaskData(db=db, orders=orders, shuffled=seeded_shuffle(products, 11))
    return iter([template(shop) for template in SHOP_TEMPLATES])
