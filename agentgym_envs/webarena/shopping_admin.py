"""The embedded shop admin panel: WebArena's CMS site (Magento admin) in miniature.

Its own store (same schema as ``shopping.py``, another seed, many customers): a dashboard,
products (search, edit price/quantity/status), orders (filter by status, cancel, ship),
customers (search, edit), reviews (delete) and a bestsellers report by year.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Callable, Iterator

from agentgym_envs.webarena.server import Request, SiteApp, paginate, redirect, url
from agentgym_envs.webarena.shopping import create_shop_schema, seed_shop
from agentgym_envs.webarena.taskgen import Draft, answer_eval, db_eval, q, seeded_shuffle

ORDER_STATUSES = ["Pending", "Processing", "Complete", "Canceled"]
YEARS = ["2022", "2023"]


def bestsellers(db: sqlite3.Connection, year: str) -> list[tuple[str, int]]:
    """(product name, units sold) of completed orders in ``year``, best first (ties by name)."""
    return [tuple(r) for r in db.execute(
        "SELECT products.name, SUM(order_items.qty) AS sold FROM order_items JOIN orders ON orders.id=order_id "
        "JOIN products ON products.id=product_id WHERE orders.status='Complete' AND substr(orders.date,1,4)=? "
        "GROUP BY products.id ORDER BY sold DESC, products.name LIMIT 10", (year,)).fetchall()]


class ShoppingAdminSite(SiteApp):
    name = "shopping_admin"
    title = "Magento Admin"
    nav = (("Dashboard", "/"), ("Orders", "/orders"), ("Products", "/products"), ("Customers", "/customers"),
           ("Reviews", "/reviews"), ("Reports", "/reports/bestsellers"))

    def create_schema(self, db: sqlite3.Connection) -> None:
        """The shop's tables (``shopping.create_shop_schema``)."""
        create_shop_schema(db)

    def seed(self, db: sqlite3.Connection) -> None:
        """A larger shop than the storefront's: 12 customers and 90 orders, from its own seed."""
        seed_shop(db, seed=23, customers=12, orders=90)

    def routes(self):
        """Magento admin's sections: dashboard, products, orders, customers, reviews and a report."""
        return [
            ("GET", "/", self.dashboard), ("GET", "/products", self.products),
            ("GET", "/products/{product_id:digits}", self.product),
            ("POST", "/products/{product_id:digits}", self.save_product), ("GET", "/orders", self.orders),
            ("GET", "/orders/{order_id:digits}", self.order),
            ("POST", "/orders/{order_id:digits}/status", self.set_status), ("GET", "/customers", self.customers),
            ("GET", "/customers/{customer_id:digits}", self.customer),
            ("POST", "/customers/{customer_id:digits}", self.save_customer),
            ("GET", "/reviews", self.reviews), ("POST", "/reviews/{review_id:digits}/delete", self.delete_review),
            ("GET", "/reports/bestsellers", self.report),
        ]

    def dashboard(self, request: Request) -> str:
        """``/``: the number of orders in each status."""
        counts = {s: self.one("SELECT COUNT(*) AS n FROM orders WHERE status=?", (s,))["n"] for s in ORDER_STATUSES}
        return self.render("Dashboard", "dashboard", counts=counts)

    def products(self, request: Request) -> str:
        """``/products?q=``: the products whose name or SKU holds the query, paginated."""
        term = request.arg("q")
        rows = self.query("SELECT * FROM products WHERE name LIKE ? OR sku LIKE ? ORDER BY id",
                          (f"%{term}%", f"%{term}%"))
        shown, pages = paginate(rows, request, "/products", q=term)
        return self.render("Products", "products", term=term, rows=rows, shown=shown, pages=pages)

    def product(self, request: Request, product_id: str) -> str:
        """``/products/<id>``: a product's edit form."""
        p = self.one("SELECT * FROM products WHERE id=?", (int(product_id),))
        return self.render(f"Edit Product: {p['name']}", "product", p=p)

    def save_product(self, request: Request, product_id: str):
        """POST ``/products/<id>``: save name, price (a leading ``$`` is allowed), quantity and status (Enabled or
        Disabled); bad values are a 400 page.
        """
        price, quantity = float(request.arg("price").lstrip("$")), int(request.arg("quantity"))
        status = request.arg("status")
        if status not in ("Enabled", "Disabled"):
            raise ValueError(f"unknown status {status!r}")
        self.execute("UPDATE products SET name=?, price=?, quantity=?, status=? WHERE id=?",
                     (request.arg("name"), price, quantity, status, int(product_id)))
        return redirect(f"/products/{product_id}")

    def orders(self, request: Request) -> str:
        """``/orders``: every order with its customer, newest first, ``?status=`` filtering and ``?q=`` matching the
        order number (with or without its leading zeros) or the customer's name; paginated.
        """
        status, term = request.arg("status"), request.arg("q")
        rows = self.query("SELECT orders.*, customers.name FROM orders JOIN customers ON customers.id=customer_id "
                          "WHERE (?='' OR status=?) ORDER BY orders.id DESC", (status, status))
        if term:
            rows = [r for r in rows
                    if term.lower() in f"{r['id']:09d} {r['name']}".lower() or term.lstrip("0") == str(r["id"])]
        shown, pages = paginate(rows, request, "/orders", status=status, q=term)
        filters = [(url("/orders", status=s), s or "All") for s in ["", *ORDER_STATUSES]]
        return self.render("Orders", "orders", term=term, filters=filters, rows=rows, shown=shown, pages=pages)

    def order(self, request: Request, order_id: str) -> str:
        """``/orders/<id>``: one order, its customer and its items."""
        o = self.one("SELECT orders.*, customers.name FROM orders JOIN customers ON customers.id=customer_id WHERE "
                     "orders.id=?", (int(order_id),))
        items = self.query("SELECT order_items.*, products.name FROM order_items JOIN products ON "
                           "products.id=product_id WHERE order_id=?", (o["id"],))
        return self.render(f"Order # {o['id']:09d}", "order", o=o, items=items)

    def set_status(self, request: Request, order_id: str):
        """POST: set an order's status to one of ``ORDER_STATUSES``; back to the order."""
        status = request.arg("status")
        if status not in ORDER_STATUSES:
            raise ValueError(f"unknown status {status!r}")
        self.execute("UPDATE orders SET status=? WHERE id=?", (status, int(order_id)))
        return redirect(f"/orders/{order_id}")

    def customers(self, request: Request) -> str:
        """``/customers?q=``: the customers whose name or email holds the query."""
        term = request.arg("q")
        rows = self.query("SELECT * FROM customers WHERE name LIKE ? OR email LIKE ? ORDER BY id",
                          (f"%{term}%", f"%{term}%"))
        return self.render("Customers", "customers", term=term, rows=rows)

    def customer(self, request: Request, customer_id: str) -> str:
        """``/customers/<id>``: a customer's edit form and their orders."""
        c = self.one("SELECT * FROM customers WHERE id=?", (int(customer_id),))
        orders = self.query("SELECT * FROM orders WHERE customer_id=? ORDER BY id", (c["id"],))
        return self.render(f"Customer: {c['name']}", "customer", c=c, orders=orders)

    def save_customer(self, request: Request, customer_id: str):
        """POST: save a customer's name, email, phone and address; back to the customer."""
        self.execute("UPDATE customers SET name=?, email=?, phone=?, address=? WHERE id=?",
                     (request.arg("name"), request.arg("email"), request.arg("phone"), request.arg("address"),
                      int(customer_id)))
        return redirect(f"/customers/{customer_id}")

    def reviews(self, request: Request) -> str:
        """``/reviews``: every review with its product, paginated."""
        rows = self.query("SELECT reviews.*, products.name FROM reviews JOIN products ON products.id=product_id ORDER "
                          "BY reviews.id")
        shown, pages = paginate(rows, request, "/reviews")
        return self.render("Reviews", "reviews", rows=rows, shown=shown, pages=pages)

    def delete_review(self, request: Request, review_id: str):
        """POST ``/reviews/<id>/delete``: delete a review; back to the list."""
        self.execute("DELETE FROM reviews WHERE id=?", (int(review_id),))
        return redirect("/reviews")

    def report(self, request: Request) -> str:
        """``/reports/bestsellers?year=``: the year's ten best-selling products (the latest year by default)."""
        year = request.arg("year") or YEARS[-1]
        years = [(url("/reports/bestsellers", year=y), y) for y in YEARS]
        rows = [(rank, name, sold) for rank, (name, sold) in enumerate(bestsellers(self.db, year), start=1)]
        return self.render(f"Bestsellers Report {year}", "report", years=years, rows=rows)


def _edit_steps(section: str, search: str, name: str, field: str, value: str, save: str) -> list[str]:
    """The expert's way to change one field of a record: open the section, find the record with its search
    box, open its edit form, set ``field`` (a role and its label, e.g. ``<textbox "Price">``) and save."""
    return [f"click <link {q(section)}>", f"type <searchbox {q(search)}> [{name}] [1]",
            f"click <link {q('Edit ' + name)}>",
            f"type {field} [{value}] [0]", f"click <button {q(save)}>", "stop [done]"]


@dataclass(frozen=True)
class AdminTaskData:
    """The seeded admin store's rows every task template draws from, read once so all templates see the same rows."""

    db: sqlite3.Connection
    customers: list[sqlite3.Row]
    orders: list[sqlite3.Row]
    shuffled: list[sqlite3.Row]  # the products in the fixed task order (seed 3)


def _bestseller_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """The top-1..3 bestsellers of each year: reading a report filtered by year."""
    for year in YEARS:
        for rank in (1, 2, 3):
            name = bestsellers(store.db, year)[rank - 1][0]
            yield Draft("bestseller", f"What is the top-{rank} best-selling product in {year}?", "/",
                        answer_eval("fuzzy_match", [name]),
                        [f"click <link {q('Reports')}>", f"click <link {q(year)}>", f"stop [{name}]"])


def _status_count_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """How many orders have a status: counting after the orders page's status filter."""
    for status in ORDER_STATUSES:
        n = store.db.execute("SELECT COUNT(*) FROM orders WHERE status=?", (status,)).fetchone()[0]
        yield Draft("status_count", f"How many orders have the status {status}?", "/",
                    answer_eval("exact_match", str(n)),
                    [f"click <link {q('Orders')}>", f"click <link {q(status)}>", f"stop [{n}]"])


def _customer_email_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """A customer's email address: a lookup through the customer search."""
    for c in store.customers:
        yield Draft("customer_email", f"What is the email address of the customer {c['name']}?", "/",
                    answer_eval("exact_match", c["email"]),
                    [f"click <link {q('Customers')}>",
                     f"type <searchbox {q('Search customers')}> [{c['name']}] [1]", f"stop [{c['email']}]"])


def _set_price_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """Raise a product's price by $5: an edit form, checked in the database."""
    for p in store.shuffled:
        new = round(p["price"] + 5, 2)
        yield Draft("set_price", f"Update the price of {p['name']} to ${new:.2f}.", "/",
                    db_eval("shopping_admin", "SELECT price FROM products WHERE id=?", [[new]], [p["id"]]),
                    _edit_steps("Products", "Search by keyword", p["name"], f"<textbox {q('Price')}>", f"{new:.2f}",
                                "Save Product"))


def _cancel_order_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """Cancel a pending order: an action button on the order's page (pending orders only)."""
    for o in [o for o in store.orders if o["status"] == "Pending"]:
        label = f"View {o['id']:09d}"
        yield Draft("cancel_order", f"Cancel order {o['id']:09d}.", "/",
                    db_eval("shopping_admin", "SELECT status FROM orders WHERE id=?", [["Canceled"]], [o["id"]]),
                    [f"click <link {q('Orders')}>",
                     f"type <searchbox {q('Search orders by ID or customer')}> [{o['id']:09d}] [1]",
                     f"click <link {q(label)}>", f"click <button {q('Cancel Order')}>", "stop [done]"])


def _disable_product_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """Disable a product: a select field in the edit form (products in reverse task order)."""
    for p in store.shuffled[::-1]:
        yield Draft("disable_product", f"Disable the product {p['name']} so it no longer shows in the store.", "/",
                    db_eval("shopping_admin", "SELECT status FROM products WHERE id=?", [["Disabled"]], [p["id"]]),
                    _edit_steps("Products", "Search by keyword", p["name"], f"<combobox {q('Status')}>", "Disabled",
                                "Save Product"))


def _stock_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """A product's units in stock: a lookup in the product grid (from the 11th product of the task order)."""
    for p in store.shuffled[10:]:
        yield Draft("stock", f"How many units of {p['name']} are in stock?", "/",
                    answer_eval("exact_match", str(p["quantity"])),
                    [f"click <link {q('Products')}>",
                     f"type <searchbox {q('Search by keyword')}> [{p['name']}] [1]", f"stop [{p['quantity']}]"])


def _phone_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """Change a customer's phone number: editing a customer rather than a product (customers in reverse order)."""
    for c in store.customers[::-1]:
        new = f"412-555-{9000 + c['id']:04d}"
        yield Draft("phone", f"Change the phone number of customer {c['name']} to {new}.", "/",
                    db_eval("shopping_admin", "SELECT phone FROM customers WHERE id=?", [[new]], [c["id"]]),
                    _edit_steps("Customers", "Search customers", c["name"], f"<textbox {q('Phone')}>", new,
                                "Save Customer"))


def _order_total_drafts(store: AdminTaskData) -> Iterator[Draft]:
    """An order's grand total: finding an order by its ID (orders newest first)."""
    for o in store.orders[::-1]:
        label = f"View {o['id']:09d}"
        yield Draft("order_total", f"What is the grand total of order {o['id']:09d}?", "/",
                    answer_eval("must_include", [f"{o['total']:,.2f}"]),
                    [f"click <link {q('Orders')}>",
                     f"type <searchbox {q('Search orders by ID or customer')}> [{o['id']:09d}] [1]",
                     f"click <link {q(label)}>", f"stop [${o['total']:,.2f}]"])


#: The admin's task templates, in the order the catalog takes drafts round-robin from them.
ADMIN_TEMPLATES: tuple[Callable[[AdminTaskData], Iterator[Draft]], ...] = (
    _bestseller_drafts, _set_price_drafts, _status_count_drafts, _cancel_order_drafts, _customer_email_drafts,
    _disable_product_drafts, _stock_drafts, _phone_drafts, _order_total_drafts,
)


def drafts(db: sqlite3.Connection) -> Iterator[Iterator[Draft]]:
    """The admin task templates, drawn from the seeded database: bestsellers, order counts and totals, customers' emails
    and phones, stock, and edits of prices, order statuses and product statuses.

    Args:
        db: the seeded database (``ShoppingAdminSite.seeded_template()``).

    Returns:
        One iterator of ``Draft`` per template, each with its evaluator and an action sequence that solves it.
    """
    db.row_factory = sqlite3.Row
    products = db.execute("SELECT * FROM products ORDER BY id").fetchall()
    customers = db.execute("SELECT * FROM customers ORDER BY id").fetchall()
    orders = db.execute("SELECT * FROM orders ORDER BY id").fetchall()
    store = AdminTaskData(db=db, customers=customers, orders=orders, shuffled=seeded_shuffle(products, 3))
    return iter([template(store) for template in ADMIN_TEMPLATES])
