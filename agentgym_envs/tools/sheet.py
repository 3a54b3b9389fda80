"""``AgentGym/Sheet-v0``: spreadsheets in SQLite, edited through Google-Sheets-like tools.

Upstream drives a real Google Sheets workbook. Here each item gets its own workbook of two or
three generated sheets (sales, grades, expenses, inventory) stored cell by cell in SQLite. Tasks
either ask a question about the data or ask for an edit (sort, delete rows, append, add a
computed column, write a total...); edits are graded by comparing every sheet of the workbook
with the expected one, so collateral damage to other sheets fails the task too.

AgentGym's Sheet server scores an edit by partial credit instead: the largest share, over the episode,
of equal cells where the open sheet and the gold sheet overlap. Rows or columns the task adds lie
outside that overlap, so an agent that opens the sheet and edits nothing scores 1 on half of the edit
tasks (32 of 64: every "add a row", "add a column" and "write a total/average into a cell"), and
one that deletes every data row scores 1 on 56 of 64: an upstream bug that tells the agent it is
done when it is not. That rule is the opt-in ``partial_credit=True``, for comparing numbers with
AgentGym's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import sqlite3
from typing import Any, Callable

import numpy as np

from agentgym_envs.core import Outcome
from agentgym_envs.tools.answers import Gold
from agentgym_envs.tools.base import AGENTGYM_FINISH, ItemWorldEnv, Step, ToolTask, draw_store_item, finish_step, step
from agentgym_envs.tools.names import FIRST_NAMES, LAST_NAMES
from agentgym_envs.tools.toolkit import Call, Param, Service, ToolError, load_env_texts, load_tools

WORLD_SEED = 7_004
MAX_ROWS, MAX_COLS = 200, 26
Grid = list[list[Any]]

PRODUCTS = (
    "Desk Lamp",
    "Office Chair",
    "Standing Desk",
    "Monitor Arm",
    "Keyboard",
    "Mouse Pad",
    "Webcam",
    "Headset",
    "Notebook",
    "Stapler",
    "Whiteboard",
    "Printer Paper",
    "Label Maker",
    "Desk Organizer",
    "USB Hub",
    "Cable Tray",
    "Footrest",
    "Bookshelf",
    "Filing Cabinet",
    "Coat Rack",
)
SUPPLIERS = ("Acme Supply", "Brightway", "Cobalt Trading", "Delta Wholesale", "Evergreen Goods")
EXPENSE_ITEMS = {
    "Travel": ("Train ticket", "Taxi", "Hotel night", "Flight", "Parking"),
    "Food": ("Team lunch", "Coffee beans", "Client dinner", "Snacks"),
    "Office": ("Printer ink", "Pens", "Desk plant", "Toner", "Folders"),
    "Software": ("Design tool license", "Cloud storage", "Password manager", "Video calls"),
}
REGIONS = ("North", "South", "East", "West")
CLASSES = ("10A", "10B", "10C")


# ---- cell values and positions -----------------------------------------------------------------


def canonical(value: Any) -> Any:
    """The comparable form of a cell: numbers (also numeric text) rounded to 2 decimals, text stripped, empty = ''."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).upper()
    if isinstance(value, (int, float)):
        return round(float(value), 2)
    text = str(value).strip()
    try:
        return round(float(text.replace(",", "")), 2) if re.fullmatch(r"[-+]?[\d,]*\.?\d+", text) else text
    except ValueError:
        return text


def column_letter(col: int) -> str:
    """The letter of column ``col`` (1 -> A; the sheets have at most 26 columns)."""
    return chr(ord("A") + col - 1)


def a1(row: int, col: int) -> str:
    """The A1 name of the cell at ``row`` and ``col`` (both from 1): ``a1(5, 3) == "C5"``."""
    return f"{column_letter(col)}{row}"


def parse_a1(position: str, what: str = "position") -> tuple[int, int]:
    """The (row, column) of a cell written in A1 notation.

    Args:
        position: the agent's cell, e.g. ``"B3"`` (spaces and lower case allowed).
        what: the argument's name in the error message.

    Returns:
        (row, column), both from 1.

    Raises:
        ToolError: the position is not a cell or its row is outside the sheet.
    """
    match = re.fullmatch(r"\s*([A-Za-z])\s*(\d+)\s*", position)
    if not match:
        raise ToolError(f"{what} must be a cell like 'B3' (column letter A-Z, row number), got {position!r}.")
    row, col = int(match.group(2)), ord(match.group(1).upper()) - ord("A") + 1
    if not 1 <= row <= MAX_ROWS:
        raise ToolError(f"{what}: rows go from 1 to {MAX_ROWS}.")
    return row, col


def trimmed(grid: Grid) -> tuple[tuple[Any, ...], ...]:
    """Canonical cells without trailing empty rows and columns."""
    rows = [[canonical(v) for v in row] for row in grid]
    width = max((max((i + 1 for i, v in enumerate(r) if v != ""), default=0) for r in rows), default=0)
    rows = [tuple(r[:width] + [""] * (width - len(r[:width]))) for r in rows]
    while rows and all(v == "" for v in rows[-1]):
        rows.pop()
    return tuple(rows)


def agentgym_match_score(open_sheet: tuple[tuple[Any, ...], ...] | None, gold: tuple[tuple[Any, ...], ...]) -> float:
    """AgentGym's Sheet reward (``get_match_score``): the share of equal cells over the rows and columns both sheets
    have (the first row's width), 0 with no sheet open or no overlap. Cells are compared in their canonical form
    (``trimmed``), as upstream compares the strings Google Sheets shows."""
    if open_sheet is None:
        return 0.0
    rows = min(len(open_sheet), len(gold))
    cols = min(len(open_sheet[0]) if open_sheet else 0, len(gold[0]) if gold else 0)
    equal = sum(open_sheet[i][j] == gold[i][j] for i in range(rows) for j in range(cols))
    return equal / (rows * cols) if rows * cols else 0.0


def number(value: Any) -> float:
    """A cell's value as a number; the agent's error when it is not one (the aggregate tools need numbers)."""
    value = canonical(value)
    if not isinstance(value, float):
        raise ToolError(f"the cell value {value!r} is not a number.")
    return value


def tidy(value: float) -> float | int:
    """Whole floats as ints, others rounded to 2 decimals (what the formula tool writes)."""
    value = round(value, 2)
    return int(value) if value == int(value) else value


# ---- the store ---------------------------------------------------------------------------------


def create_workbook(sheets: dict[str, Grid]) -> sqlite3.Connection:
    """A workbook as a SQLite store: one table of sheets, one of non-empty cells.

    Args:
        sheets: each sheet's name and its rows (row 1 the header).

    Returns:
        The in-memory database the Sheet service works on.
    """
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript("""
        CREATE TABLE sheets (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
        CREATE TABLE cells (sheet_id INTEGER NOT NULL REFERENCES sheets(id), row INTEGER NOT NULL, col INTEGER NOT NULL,
                            value, PRIMARY KEY (sheet_id, row, col));
        """)
    for name, grid in sheets.items():
        sheet_id = db.execute("INSERT INTO sheets (name) VALUES (?)", (name,)).lastrowid
        _write(db, sheet_id, grid)
    db.commit()
    return db


def _write(db: sqlite3.Connection, sheet_id: int, grid: Grid) -> None:
    db.execute("DELETE FROM cells WHERE sheet_id = ?", (sheet_id,))
    db.executemany(
        "INSERT INTO cells VALUES (?, ?, ?, ?)",
        [
            (sheet_id, r, c, v)
            for r, row in enumerate(grid, start=1)
            for c, v in enumerate(row, start=1)
            if v not in (None, "")
        ],
    )


def _read(db: sqlite3.Connection, sheet_id: int) -> Grid:
    cells = db.execute("SELECT row, col, value FROM cells WHERE sheet_id = ?", (sheet_id,)).fetchall()
    rows = max((r for r, _, _ in cells), default=0)
    cols = max((c for _, c, _ in cells), default=0)
    grid: Grid = [[""] * cols for _ in range(rows)]
    for r, c, v in cells:
        grid[r - 1][c - 1] = v
    return grid


class SheetService(Service):
    """Google-Sheets-like tools; edits go to the SQLite ``cells`` table of the open sheet."""

    TOOLS = load_tools("sheet")
    WRITE_TOOLS = frozenset(
        {
            "update_cell",
            "update_range",
            "insert_rows",
            "insert_cols",
            "delete_batch_data",
            "sort_sheet_by_col",
            "update_cell_by_formula",
        }
    )

    def __init__(self, db: sqlite3.Connection):
        super().__init__(db)
        self.open_id: int | None = None
        self.open_name = ""

    def sheet_names(self) -> list[str]:
        """The workbook's sheet names, in order."""
        return [r[0] for r in self.db.execute("SELECT name FROM sheets ORDER BY id")]

    def grid_of(self, name: str) -> Grid:
        """The rows of sheet ``name``, as stored."""
        sheet_id = self.db.execute("SELECT id FROM sheets WHERE name = ?", (name,)).fetchone()[0]
        return _read(self.db, sheet_id)

    def state(self) -> Any:
        """What a state-changing task is graded on: every sheet's canonical cells (``trimmed``)."""
        return tuple((name, trimmed(self.grid_of(name))) for name in self.sheet_names())

    def example_strings(self) -> list[str]:
        """Sheet names, cells and a value, so random calls sometimes name something real."""
        return self.sheet_names() + ["A1", "B3", "C2", "North"]

    def example_value(self, param: Param, rng: Any) -> Any:
        """A random cell for positions and a real sheet name for ``sheet_name``, else the default."""
        if param.name.endswith("position"):
            return a1(int(rng.integers(1, 12)), int(rng.integers(1, 6)))
        if param.name == "sheet_name":
            names = self.sheet_names()
            return names[int(rng.integers(len(names)))]
        if param.type == "integer":
            return int(rng.integers(1, 8))
        return super().example_value(param, rng)

    # ---- helpers ------------------------------------------------------------------------------
    def _grid(self) -> Grid:
        if self.open_id is None:
            raise ToolError("no sheet is open; call open_sheet first (list_sheets shows the names).")
        return _read(self.db, self.open_id)

    def _save(self, grid: Grid) -> None:
        assert self.open_id is not None
        _write(self.db, self.open_id, grid)
        self.db.commit()

    @staticmethod
    def _fit(grid: Grid, rows: int, cols: int) -> Grid:
        width = max(cols, max((len(r) for r in grid), default=0))
        if max(rows, len(grid)) > MAX_ROWS or width > MAX_COLS:
            raise ToolError(f"a sheet holds at most {MAX_ROWS} rows and {MAX_COLS} columns.")
        grid = [list(r) + [""] * (width - len(r)) for r in grid]
        grid += [[""] * width for _ in range(rows - len(grid))]
        return grid

    @staticmethod
    def _cell(value: Any, where: str) -> Any:
        if isinstance(value, (list, dict)) or value is None:
            raise ToolError(
                f"{where}: a cell value must be a string or a number, got "
                f"{type(value).__name__ if value is not None else 'null'}."
            )
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and not (math.isfinite(value) and abs(value) < 1e15)
        ):
            raise ToolError(f"{where}: the number {value} is too large for a cell.")
        if isinstance(value, str) and len(value) > 1000:
            raise ToolError(f"{where}: a cell holds at most 1000 characters.")
        return value

    # ---- tools --------------------------------------------------------------------------------
    def list_sheets(self) -> list[str]:
        """The ``list_sheets`` tool: list the sheets of the workbook.

        Returns:
            A list of sheet names.
        """
        return self.sheet_names()

    def open_sheet(self, sheet_name: str) -> str:
        """The ``open_sheet`` tool: open a sheet; the other tools work on the open sheet.

        Args:
            sheet_name: the sheet's name.

        Returns:
            A confirmation with the sheet's size.
        """
        row = self.db.execute(
            "SELECT id, name FROM sheets WHERE lower(name) = lower(?)", (sheet_name.strip(),)
        ).fetchone()
        if row is None:
            raise ToolError(f"no sheet named {sheet_name!r}; the sheets are: {', '.join(self.sheet_names())}.")
        self.open_id, self.open_name = row
        grid = self._grid()
        return f"Opened sheet '{row[1]}': {len(grid)} rows x {max((len(r) for r in grid), default=0)} columns."

    def get_all_values(self) -> Grid:
        """The ``get_all_values`` tool: read every row of the open sheet (row 1 is the header).

        Returns:
            A list of rows, each a list of cell values.
        """
        return self._grid()

    def get_range(self, start_position: str, end_position: str) -> Grid:
        """The ``get_range`` tool: read a rectangular block of cells.

        Args:
            start_position: top-left cell, a cell in A1 notation, e.g. "B3".
            end_position: bottom-right cell.

        Returns:
            A list of rows of the block.
        """
        (r1, c1), (r2, c2) = parse_a1(start_position, "start_position"), parse_a1(end_position, "end_position")
        if r2 < r1 or c2 < c1:
            raise ToolError("end_position must be below and to the right of start_position.")
        grid = self._fit(self._grid(), r2, c2)
        return [row[c1 - 1 : c2] for row in grid[r1 - 1 : r2]]

    def get_a1_notation(self, row: int, col: int) -> str:
        """The ``get_a1_notation`` tool: convert a row and column number into A1 notation.

        Args:
            row: row number, from 1.
            col: column number, from 1.

        Returns:
            A string like "C5".
        """
        if not (1 <= row <= MAX_ROWS and 1 <= col <= MAX_COLS):
            raise ToolError(f"row must be 1-{MAX_ROWS} and col 1-{MAX_COLS}.")
        return a1(row, col)

    def filter_rows(self, col_num: int, condition: str, value: Any) -> dict[str, Any]:
        """The ``filter_rows`` tool: find the data rows (below the header) whose cell in a column meets a condition.

        Args:
            col_num: column number, from 1.
            condition: the comparison. One of "==", "!=", ">", ">=", "<", "<=", "contains".
            value: the value to compare with (a number for >, >=, <, <=).

        Returns:
            {"rows": [{"row": <row number>, "values": [cells]}, ...]}.
        """
        grid = self._grid()
        width = max((len(r) for r in grid), default=0)
        if not 1 <= col_num <= width:
            raise ToolError(f"col_num must be between 1 and {width}.")
        target = canonical(value)
        if condition in (">", ">=", "<", "<=") and not isinstance(target, float):
            raise ToolError(f"condition {condition} needs a number as value.")
        hits = []
        for r, row in enumerate(grid[1:], start=2):
            cell = canonical(row[col_num - 1] if col_num - 1 < len(row) else "")
            if _compare(cell, condition, target):
                hits.append({"row": r, "values": row})
        return {"rows": hits}

    def update_cell(self, position: str, value: Any) -> str:
        """The ``update_cell`` tool: write one value into a cell (the sheet grows if needed).

        Args:
            position: a cell in A1 notation, e.g. "B3".
            value: a string or a number.

        Returns:
            A confirmation.
        """
        row, col = parse_a1(position)
        grid = self._fit(self._grid(), row, col)
        grid[row - 1][col - 1] = self._cell(value, "update_cell")
        self._save(grid)
        return f"Cell {a1(row, col)} is now {value!r}."

    def update_range(self, start_position: str, end_position: str, values_list: list[Any]) -> str:
        """The ``update_range`` tool: write a block of values, row by row, into the cells from start_position to
        end_position.

        Args:
            start_position: top-left cell, a cell in A1 notation, e.g. "B3".
            end_position: bottom-right cell.
            values_list: a list of rows, each a list of values; its shape must match the range.

        Returns:
            A confirmation.
        """
        (r1, c1), (r2, c2) = parse_a1(start_position, "start_position"), parse_a1(end_position, "end_position")
        if r2 < r1 or c2 < c1:
            raise ToolError("end_position must be below and to the right of start_position.")
        shape = (r2 - r1 + 1, c2 - c1 + 1)
        if len(values_list) != shape[0] or any(not isinstance(r, list) or len(r) != shape[1] for r in values_list):
            raise ToolError(
                f"values_list must be {shape[0]} rows of {shape[1]} values to fill {a1(r1, c1)}:{a1(r2, c2)}."
            )
        grid = self._fit(self._grid(), r2, c2)
        for i, row in enumerate(values_list):
            for j, value in enumerate(row):
                grid[r1 - 1 + i][c1 - 1 + j] = "" if value is None else self._cell(value, "update_range")
        self._save(grid)
        return f"Updated {shape[0] * shape[1]} cells in {a1(r1, c1)}:{a1(r2, c2)}."

    def insert_rows(self, values_list: list[Any], row_idx: int) -> str:
        """The ``insert_rows`` tool: insert rows before row_idx; the rows below move down (row_idx = number of rows + 1
        appends).

        Args:
            values_list: a list of rows, each a list of values.
            row_idx: where to insert, from 2 (the header stays first).

        Returns:
            A confirmation.
        """
        grid = self._grid()
        if not 2 <= row_idx <= len(grid) + 1:
            raise ToolError(f"row_idx must be between 2 and {len(grid) + 1} (the number of rows + 1 appends).")
        if not values_list or any(not isinstance(r, list) for r in values_list):
            raise ToolError("values_list must be a non-empty list of rows, each a list of values.")
        if len(grid) + len(values_list) > MAX_ROWS or any(len(r) > MAX_COLS for r in values_list):
            raise ToolError(f"a sheet holds at most {MAX_ROWS} rows and {MAX_COLS} columns (A-Z); it has {len(grid)} "
                            f"rows, and each inserted row may have at most {MAX_COLS} values.")
        rows = [[self._cell(v, "insert_rows") for v in r] for r in values_list]
        grid = grid[: row_idx - 1] + rows + grid[row_idx - 1 :]
        self._save(self._fit(grid, len(grid), 0))
        return f"Inserted {len(rows)} row(s) at row {row_idx}."

    def insert_cols(self, values_list: list[Any], col_idx: int) -> str:
        """The ``insert_cols`` tool: insert columns before col_idx; the columns to the right move (col_idx = number of
        columns + 1 appends).

        Args:
            values_list: a list of columns, each a list of values from the header down.
            col_idx: where to insert, from 1.

        Returns:
            A confirmation.
        """
        grid = self._grid()
        width = max((len(r) for r in grid), default=0)
        if not 1 <= col_idx <= width + 1:
            raise ToolError(f"col_idx must be between 1 and {width + 1} (the number of columns + 1 appends).")
        if not values_list or any(not isinstance(c, list) for c in values_list):
            raise ToolError(
                "values_list must be a non-empty list of columns, each a list of values from the header down."
            )
        if width + len(values_list) > MAX_COLS:
            raise ToolError(f"a sheet holds at most {MAX_COLS} columns; it has {width}, so at most "
                            f"{MAX_COLS - width} more fit.")
        columns = [[self._cell(v, "insert_cols") for v in c] for c in values_list]
        height = max(len(grid), max(len(c) for c in columns))
        grid = self._fit(grid, height, width)
        for offset, column in enumerate(columns):
            for r in range(height):
                grid[r].insert(col_idx - 1 + offset, column[r] if r < len(column) else "")
        self._save(grid)
        return f"Inserted {len(columns)} column(s) at column {column_letter(col_idx)}."

    def delete_batch_data(self, dimension: str, index_list: list[Any]) -> str:
        """The ``delete_batch_data`` tool: delete whole rows or columns; the rest moves up or left.

        Args:
            dimension: what to delete. One of "row", "col".
            index_list: row or column numbers (as before the deletion).

        Returns:
            A confirmation.
        """
        grid = self._grid()
        size = len(grid) if dimension == "row" else max((len(r) for r in grid), default=0)
        if not index_list or any(
            not isinstance(i, int) or isinstance(i, bool) or not 1 <= i <= size for i in index_list
        ):
            raise ToolError(f"index_list must be a non-empty list of {dimension} numbers between 1 and {size}.")
        doomed = set(index_list)
        if dimension == "row":
            grid = [row for r, row in enumerate(grid, start=1) if r not in doomed]
        else:
            grid = [[v for c, v in enumerate(row, start=1) if c not in doomed] for row in grid]
        self._save(grid)
        return f"Deleted {len(doomed)} {dimension}(s)."

    def sort_sheet_by_col(self, col_num: int, order: str) -> str:
        """The ``sort_sheet_by_col`` tool: sort the data rows (the header stays first) by one column; equal values keep
        their order.

        Args:
            col_num: column number, from 1.
            order: ascending or descending. One of "asc", "des".

        Returns:
            A confirmation.
        """
        grid = self._grid()
        width = max((len(r) for r in grid), default=0)
        if not 1 <= col_num <= width:
            raise ToolError(f"col_num must be between 1 and {width}.")
        self._save(grid[:1] + sort_rows(grid[1:], col_num, order == "des"))
        direction = 'descending' if order == 'des' else 'ascending'
        return f"Sorted rows 2-{len(grid)} by column {column_letter(col_num)} ({direction})."

    def update_cell_by_formula(
        self, operator: str, start_position: str, end_position: str, result_position: str
    ) -> str | float | int:
        """The ``update_cell_by_formula`` tool: compute an aggregate over a block of cells and write the result (rounded
        to 2 decimals) into a cell.

        Args:
            operator: the aggregate. One of "SUM", "AVERAGE", "MIN", "MAX", "COUNT", "PRODUCT".
            start_position: first cell of the block, a cell in A1 notation, e.g. "B3".
            end_position: last cell of the block.
            result_position: the cell that receives the result.

        Returns:
            The computed value.
        """
        block = self.get_range(start_position, end_position)
        values = [canonical(v) for row in block for v in row if canonical(v) != ""]
        numbers = [v for v in values if isinstance(v, float)]
        if operator != "COUNT" and not numbers:
            raise ToolError(f"the block {start_position}:{end_position} holds no numbers.")
        result = aggregate(operator, numbers, len(values))
        self.update_cell(result_position, self._cell(result, "update_cell_by_formula"))
        return result


def _compare(cell: Any, condition: str, target: Any) -> bool:
    if condition == "contains":
        return str(target).lower() in str(cell).lower()
    if condition in ("==", "!="):
        equal = cell == target if type(cell) is type(target) else str(cell).lower() == str(target).lower()
        return equal if condition == "==" else not equal
    if not isinstance(cell, float):
        return False
    return {">": cell > target, ">=": cell >= target, "<": cell < target, "<=": cell <= target}[condition]


def sort_rows(rows: Grid, col_num: int, descending: bool) -> Grid:
    """Stable sort by one column; numbers before text, empty cells last."""

    def key(row: list[Any]) -> tuple[int, Any]:
        value = canonical(row[col_num - 1] if col_num - 1 < len(row) else "")
        return (0, value) if isinstance(value, float) else ((1, value.lower()) if value != "" else (2, ""))

    filled = [r for r in rows if key(r)[0] < 2]
    empty = [r for r in rows if key(r)[0] == 2]
    return sorted(filled, key=key, reverse=descending) + empty


def aggregate(operator: str, numbers: list[float], count: int) -> float | int:
    """The value ``update_cell_by_formula`` writes.

    Args:
        operator: SUM, AVERAGE, MIN, MAX, PRODUCT or COUNT.
        numbers: the numeric cells of the block.
        count: how many cells of the block are not empty (what COUNT counts).

    Returns:
        The aggregate, rounded as the tool writes it (``tidy``).
    """
    if operator == "COUNT":
        return count
    result = {
        "SUM": sum(numbers),
        "AVERAGE": sum(numbers) / len(numbers) if numbers else 0.0,
        "MIN": min(numbers),
        "MAX": max(numbers),
        "PRODUCT": float(np.prod(numbers)),
    }[operator]
    return tidy(result)


# ---- workbook generation -------------------------------------------------------------------------


def _distinct(rng: np.random.Generator, low: int, high: int, n: int) -> list[int]:
    return sorted(int(v) for v in rng.choice(np.arange(low, high), size=n, replace=False)) if n else []


def _sales(rng: np.random.Generator) -> Grid:
    n = int(rng.integers(8, 14))
    products = [PRODUCTS[i] for i in rng.choice(len(PRODUCTS), size=n, replace=False)]
    units = [int(u) for u in rng.permutation(_distinct(rng, 5, 400, n))]
    prices = [round(float(p), 2) for p in rng.choice(np.arange(3.0, 250.0, 0.25), size=n, replace=False)]
    reps = [f"{FIRST_NAMES[int(rng.integers(len(FIRST_NAMES)))]}" for _ in range(n)]
    return [["Product", "Region", "Units Sold", "Unit Price", "Sales Rep"]] + [
        [products[i], REGIONS[int(rng.integers(4))], units[i], prices[i], reps[i]] for i in range(n)
    ]


def _grades(rng: np.random.Generator) -> Grid:
    n = int(rng.integers(8, 14))
    pairs = rng.choice(len(FIRST_NAMES) * len(LAST_NAMES), size=n, replace=False)
    names = [f"{FIRST_NAMES[int(p) // len(LAST_NAMES)]} {LAST_NAMES[int(p) % len(LAST_NAMES)]}" for p in pairs]
    columns = [rng.permutation(_distinct(rng, 35, 101, n)) for _ in range(3)]
    return [["Student", "Class", "Math", "Physics", "Chemistry"]] + [
        [names[i], CLASSES[int(rng.integers(3))], int(columns[0][i]), int(columns[1][i]), int(columns[2][i])]
        for i in range(n)
    ]


def _expenses(rng: np.random.Generator) -> Grid:
    n = int(rng.integers(8, 14))
    start = dt.date(2024, 1, 1) + dt.timedelta(days=int(rng.integers(0, 300)))
    days = _distinct(rng, 0, 60, n)
    amounts = [round(float(a), 2) for a in rng.choice(np.arange(4.0, 900.0, 0.05), size=n, replace=False)]
    rows = []
    for i in range(n):
        category = list(EXPENSE_ITEMS)[int(rng.integers(len(EXPENSE_ITEMS)))]
        items = EXPENSE_ITEMS[category]
        rows.append(
            [
                (start + dt.timedelta(days=days[i])).isoformat(),
                items[int(rng.integers(len(items)))],
                category,
                amounts[i],
            ]
        )
    return [["Date", "Item", "Category", "Amount"]] + rows


def _inventory(rng: np.random.Generator) -> Grid:
    n = int(rng.integers(8, 14))
    items = [PRODUCTS[i] for i in rng.choice(len(PRODUCTS), size=n, replace=False)]
    stock = [int(s) for s in rng.permutation(_distinct(rng, 0, 250, n))]
    return [["SKU", "Item", "Stock", "Reorder Level", "Supplier"]] + [
        [
            f"SKU-{int(rng.integers(1000, 9999))}-{i}",
            items[i],
            stock[i],
            int(rng.integers(10, 120)),
            SUPPLIERS[int(rng.integers(len(SUPPLIERS)))],
        ]
        for i in range(n)
    ]


SHEET_MAKERS: dict[str, Callable[[np.random.Generator], Grid]] = {
    "Sales": _sales,
    "Grades": _grades,
    "Expenses": _expenses,
    "Inventory": _inventory,
}
NUMERIC = {
    "Sales": ("Units Sold", "Unit Price"),
    "Grades": ("Math", "Physics", "Chemistry"),
    "Expenses": ("Amount",),
    "Inventory": ("Stock", "Reorder Level"),
}
CATEGORICAL = {"Sales": ("Region",), "Grades": ("Class",), "Expenses": ("Category",), "Inventory": ("Supplier",)}
KEYS = {"Sales": "Product", "Grades": "Student", "Expenses": "Item", "Inventory": "Item"}


def workbook(rng: np.random.Generator) -> dict[str, Grid]:
    """A random workbook of two or three of the sheet kinds of ``SHEET_MAKERS``, each filled from ``rng``."""
    names = [str(n) for n in rng.choice(list(SHEET_MAKERS), size=int(rng.integers(2, 4)), replace=False)]
    return {name: SHEET_MAKERS[name](rng) for name in names}


# ---- task generation ---------------------------------------------------------------------------


class _Generator:
    def __init__(self, book: dict[str, Grid], rng: np.random.Generator):
        self.book, self.rng = book, rng
        self.name = list(book)[0]
        self.grid = book[self.name]

    def col(self, header: str) -> int:
        return self.grid[0].index(header) + 1

    def choice(self, options: Any) -> Any:
        return options[int(self.rng.integers(len(options)))]

    def target(self, grid: Grid) -> tuple[Any, ...]:
        return tuple((n, trimmed(grid if n == self.name else g)) for n, g in self.book.items())

    def open(self) -> Step:
        return step(f"The task is about the sheet '{self.name}'; open it.", "open_sheet", sheet_name=self.name)

    @staticmethod
    def formula(thought: str, operator: str, col: int, n: int, result_position: str) -> Step:
        """``operator`` over the values of column ``col`` (rows 2 to ``n``) into ``result_position``."""
        return step(thought, "update_cell_by_formula", operator=operator, start_position=a1(2, col),
                    end_position=a1(n, col), result_position=result_position)

    def read(self) -> Step:
        return step("Read the sheet to see its layout.", "get_all_values")

    def last(self) -> str:
        return a1(len(self.grid), len(self.grid[0]))


def _sort(g: _Generator) -> ToolTask:
    header = g.choice(NUMERIC[g.name])
    descending = bool(g.rng.integers(2))
    col = g.col(header)
    result = g.grid[:1] + sort_rows(g.grid[1:], col, descending)
    order = "descending" if descending else "ascending"
    return ToolTask(
        "sort",
        f"In the sheet '{g.name}', sort the data rows by '{header}' in {order} order (the header row stays on top).",
        [
            g.open(),
            step(
                f"'{header}' is column {col}; sort by it.",
                "sort_sheet_by_col",
                col_num=col,
                order="des" if descending else "asc",
            ),
        ],
        target=g.target(result),
    )


def _column_total(g: _Generator) -> ToolTask:
    header = g.choice(NUMERIC[g.name])
    col, n = g.col(header), len(g.grid)
    total = aggregate("SUM", [float(r[col - 1]) for r in g.grid[1:]], n - 1)
    result = [list(r) for r in g.grid] + [[""] * len(g.grid[0])]
    result[n][col - 1] = total
    thought = f"'{header}' is column {column_letter(col)}, values in rows 2-{n}; put the SUM in {a1(n + 1, col)}."
    return ToolTask(
        "column_total",
        f"In the sheet '{g.name}', write the total of the '{header}' column in the cell directly below its last value.",
        [
            g.open(),
            g.read(),
            g.formula(thought, "SUM", col, n, a1(n + 1, col)),
        ],
        target=g.target(result),
    )


def _delete_where(g: _Generator) -> ToolTask | None:
    header = CATEGORICAL[g.name][0]
    col = g.col(header)
    value = g.choice(sorted({r[col - 1] for r in g.grid[1:]}))
    doomed = [r for r, row in enumerate(g.grid, start=1) if r > 1 and row[col - 1] == value]
    if len(doomed) in (0, len(g.grid) - 1):
        return None
    result = [row for r, row in enumerate(g.grid, start=1) if r not in doomed]
    return ToolTask(
        "delete_where",
        f"In the sheet '{g.name}', delete every row whose '{header}' is '{value}'.",
        [
            g.open(),
            step(f"Find the rows with {header} = {value}.", "filter_rows", col_num=col, condition="==", value=value),
            step(f"Delete rows {doomed}.", "delete_batch_data", dimension="row", index_list=doomed),
        ],
        target=g.target(result),
    )


def _new_row(g: _Generator) -> list[Any]:
    fresh = {
        "Sales": lambda: [
            g.choice([p for p in PRODUCTS if p not in {r[0] for r in g.grid}]),
            g.choice(REGIONS),
            int(g.rng.integers(5, 400)),
            round(float(g.rng.integers(300, 25000)) / 100, 2),
            g.choice(FIRST_NAMES),
        ],
        "Grades": lambda: [
            f"{g.choice(FIRST_NAMES)} {g.choice(LAST_NAMES)}",
            g.choice(CLASSES),
            int(g.rng.integers(35, 101)),
            int(g.rng.integers(35, 101)),
            int(g.rng.integers(35, 101)),
        ],
        "Expenses": lambda: [
            str(g.grid[-1][0]),
            "Conference fee",
            "Travel",
            round(float(g.rng.integers(1000, 90000)) / 100, 2),
        ],
        "Inventory": lambda: [
            f"SKU-{int(g.rng.integers(1000, 9999))}-N",
            g.choice([p for p in PRODUCTS if p not in {r[1] for r in g.grid}]),
            int(g.rng.integers(0, 250)),
            int(g.rng.integers(10, 120)),
            g.choice(SUPPLIERS),
        ],
    }
    return fresh[g.name]()


def _append_row(g: _Generator) -> ToolTask:
    row = _new_row(g)
    described = ", ".join(f"{h}: {v}" for h, v in zip(g.grid[0], row))
    return ToolTask(
        "append_row",
        f"Add a new row at the end of the sheet '{g.name}' with {described}.",
        [
            g.open(),
            g.read(),
            step("Append the row after the last one.", "insert_rows", values_list=[row], row_idx=len(g.grid) + 1),
        ],
        target=g.target(g.grid + [row]),
    )


def _update_value(g: _Generator) -> ToolTask:
    key_header, header = KEYS[g.name], g.choice(NUMERIC[g.name])
    key_col, col = g.col(key_header), g.col(header)
    r = int(g.rng.integers(2, len(g.grid) + 1))
    key = g.grid[r - 1][key_col - 1]
    old = g.grid[r - 1][col - 1]
    new = (
        old + int(g.rng.integers(1, 40)) if isinstance(old, int) else round(old + float(g.rng.integers(1, 400)) / 4, 2)
    )
    result = [list(row) for row in g.grid]
    result[r - 1][col - 1] = new
    return ToolTask(
        "update_value",
        f"In the sheet '{g.name}', change the '{header}' of '{key}' to {new}.",
        [
            g.open(),
            step(f"Find the row of {key}.", "filter_rows", col_num=key_col, condition="==", value=key),
            step(
                f"It is row {r}; '{header}' is column {column_letter(col)}.",
                "update_cell",
                position=a1(r, col),
                value=new,
            ),
        ],
        target=g.target(result),
    )


def _filtered_sum(g: _Generator) -> ToolTask:
    group_header, header = CATEGORICAL[g.name][0], g.choice(NUMERIC[g.name])
    group_col, col = g.col(group_header), g.col(header)
    value = g.choice(sorted({r[group_col - 1] for r in g.grid[1:]}))
    total = tidy(sum(float(r[col - 1]) for r in g.grid[1:] if r[group_col - 1] == value))
    return ToolTask(
        "filtered_sum",
        f"In the sheet '{g.name}', what is the total '{header}' of the rows whose '{group_header}' is '{value}'?",
        [
            g.open(),
            step(
                f"Find the rows with {group_header} = {value}.",
                "filter_rows",
                col_num=group_col,
                condition="==",
                value=value,
            ),
            finish_step(total, f"Adding up their '{header}' gives {total}."),
        ],
        Gold(total, "number", tolerance=0.011),
    )


def _computed_column(g: _Generator) -> ToolTask:
    rows = g.grid[1:]
    if g.name == "Sales":
        header, values, what = "Revenue", [tidy(r[2] * r[3]) for r in rows], "Units Sold times Unit Price"
    elif g.name == "Grades":
        header, values, what = (
            "Average",
            [tidy((r[2] + r[3] + r[4]) / 3) for r in rows],
            "the average of Math, Physics and Chemistry, rounded to 2 decimals",
        )
    elif g.name == "Expenses":
        header, values, what = "Month", [int(str(r[0])[5:7]) for r in rows], "the month number (1-12) of the Date"
    else:
        header, values, what = (
            "To Order",
            [max(0, r[3] - r[2]) for r in rows],
            "Reorder Level minus Stock, or 0 if that is negative",
        )
    column = [header] + values
    result = [list(r) + [v] for r, v in zip(g.grid, column)]
    return ToolTask(
        "computed_column",
        f"In the sheet '{g.name}', add a column '{header}' after the last column, holding for each row {what}.",
        [
            g.open(),
            g.read(),
            step(
                f"Append the column '{header}' with the computed values.",
                "insert_cols",
                values_list=[column],
                col_idx=len(g.grid[0]) + 1,
            ),
        ],
        target=g.target(result),
    )


def _max_lookup(g: _Generator) -> ToolTask:
    key_header, header = KEYS[g.name], g.choice(NUMERIC[g.name])
    key_col, col = g.col(key_header), g.col(header)
    values = [r[col - 1] for r in g.grid[1:]]
    if values.count(max(values)) > 1:
        header = NUMERIC[g.name][0]
        col = g.col(header)
    best = max(g.grid[1:], key=lambda r: r[col - 1])
    return ToolTask(
        "max_lookup",
        f"In the sheet '{g.name}', which {key_header.lower()} has the highest '{header}'?",
        [
            g.open(),
            g.read(),
            finish_step(
                best[key_col - 1], f"The highest '{header}' is {best[col - 1]}, in the row of {best[key_col - 1]}."
            ),
        ],
        Gold(best[key_col - 1]),
    )


def _rename_header(g: _Generator) -> ToolTask:
    col = int(g.rng.integers(1, len(g.grid[0]) + 1))
    old = g.grid[0][col - 1]
    new = g.choice(["Total " + old, old + " (2024)", old.upper(), "Q3 " + old])
    result = [list(r) for r in g.grid]
    result[0][col - 1] = new
    return ToolTask(
        "rename_header",
        f"In the sheet '{g.name}', rename the column '{old}' to '{new}'.",
        [
            g.open(),
            g.read(),
            step(f"'{old}' is the header cell {a1(1, col)}.", "update_cell", position=a1(1, col), value=new),
        ],
        target=g.target(result),
    )


def _average_into_cell(g: _Generator) -> ToolTask:
    header = g.choice(NUMERIC[g.name])
    col, n = g.col(header), len(g.grid)
    where = a1(n + 2, col)
    average = aggregate("AVERAGE", [float(r[col - 1]) for r in g.grid[1:]], n - 1)
    result = [list(r) for r in g.grid] + [[""] * len(g.grid[0]) for _ in range(2)]
    result[n + 1][col - 1] = average
    return ToolTask(
        "average_into_cell",
        f"In the sheet '{g.name}', put the average of the '{header}' column, rounded to 2 decimals, into cell {where}.",
        [
            g.open(),
            g.read(),
            g.formula(f"Average of {a1(2, col)}:{a1(n, col)} into {where}.", "AVERAGE", col, n, where),
        ],
        target=g.target(result),
    )


TEMPLATES = (_sort, _column_total, _delete_where, _append_row, _update_value, _filtered_sum, _computed_column,
             _max_lookup, _rename_header, _average_into_cell)


def generate(local: int) -> tuple[dict[str, Grid], ToolTask]:
    """The workbook and task of item ``local``; the task is about the workbook's first sheet."""

    def make(rng: np.random.Generator) -> tuple[dict[str, Grid], _Generator]:
        book = workbook(rng)
        return book, _Generator(book, rng)

    return draw_store_item(WORLD_SEED, local, TEMPLATES, make, lambda book: {"sheet": list(book)[0]})


#: AgentGym's Sheet ``finish`` (``agentenv/envs/sheet.py``): no parameters, the sheet's values come back.
AGENTGYM_SHEET_FINISH = (
    "Name: finish()\n"
    "Description: Return an answer and finish the task\n"
    "Returns:\n"
    "- result (Type: array[array[Any]]): Return all cell values or an error message."
)


class SheetEnv(ItemWorldEnv):
    """Spreadsheet edits and questions over a per-item workbook; edits are graded on the final sheets."""

    subtask = "Sheet"
    stateful = True
    agentgym_finish_any_case = True  # its server: "finish" in action.lower()
    agentgym_finish_takes_answer = False  # its finish(): no argument read, the episode ends
    # agentgym_hint: AgentGym's without its 4th note ("freeze the first row before sort col": no freeze tool)
    intro, example_call, agentgym_hint = load_env_texts("sheet")

    def __init__(self, task_id: str, render_mode: str | None = None, detailed_instruction: bool = False,
                 lenient_answers: bool | None = None, partial_credit: bool = False):
        """``partial_credit=True`` (with AgentGym's rules, not ``detailed_instruction``): an edit task is scored as
        AgentGym's Sheet server scores it (``agentgym_match_score``, the best over the episode; the episode ends at
        "finish" only), not 1 for the whole workbook right and 0 otherwise; ``info["success"]`` still says whether
        the data was right."""
        super().__init__(task_id, render_mode=render_mode, detailed_instruction=detailed_instruction,
                         lenient_answers=lenient_answers)
        self.partial_credit = bool(partial_credit) and not detailed_instruction
        if self.partial_credit:
            self._ends_when_state_reached = False  # upstream ends only on "finish"

    def _open_item(self, local: int) -> tuple[SheetService, ToolTask]:
        book, task = generate(local)
        return SheetService(create_workbook(book)), task

    def _agentgym_outcome(self, text: str, ends: bool, valid: bool = True,
                          info: dict[str, Any] | None = None, parsed: bool = True) -> Outcome:
        """Under ``partial_credit``, an edit task's reward is updated as AgentGym's Sheet server's ``update`` does:
        after every step whose call parsed and whose answer does not say "Invalid"; success stays the data being
        right, never the overlap score (which can reach 1 with the data wrong)."""
        assert self.current is not None and isinstance(self.service, SheetService)
        if not (self.partial_credit and self.current.changes_state):
            return super()._agentgym_outcome(text, ends, valid, info, parsed)
        if parsed and "Invalid" not in text:
            open_grid = None if self.service.open_id is None else trimmed(self.service.grid_of(self.service.open_name))
            self._reached = max(self._reached, agentgym_match_score(open_grid, self.current.target[0][1]))
        return dataclasses.replace(super()._agentgym_outcome(text, ends, valid, info, parsed),
                                   success=self._state_reached())

    def oracle_action(self) -> str:
        """The expert's next call; under ``partial_credit`` an edit task's episode ends only at "finish", so the
        expert finishes once the data is right."""
        assert self.current is not None
        if self.partial_credit and self.current.changes_state and self._state_reached():
            return f"Thought: The sheet is as the task asks; finish.\n\nAction: {self._render(Call('finish', {}))}"
        return super().oracle_action()

    def _finish_meets_subgoal(self, answer: Any) -> bool:
        """Under ``partial_credit`` an edit task's ``finish`` scores the sheet like any other step, not the data."""
        assert self.current is not None
        if self.partial_credit and self.current.changes_state:
            return False
        return super()._finish_meets_subgoal(answer)

    agentgym_check_valid_actions = False  # its server has none: "Invalid action" there

    def _agentgym_finish_doc(self) -> str:
        """AgentGym's Sheet ``finish()`` (no answer: it shows the sheet); a question of ours keeps ``finish(answer)``,
        its answer being what is graded."""
        assert self.current is not None
        return AGENTGYM_SHEET_FINISH if self.current.changes_state else AGENTGYM_FINISH

    def _agentgym_invalid_action(self, head: str) -> str:
        """AgentGym's Sheet names its actions after an unknown one."""
        names = [tool.name for tool in SheetService.TOOLS] + ["finish"]
        return f"ERROR | Invalid action: {head}. Please choose another valid action from {names}"

    def _agentgym_finish_text(self, answer: Any) -> str:
        """AgentGym's Sheet ``finish`` answers the open sheet's values (its ``get_all_values``), or, with no sheet
        open, its "Please open a sheet before operating it"; an answer given is graded, not shown."""
        assert isinstance(self.service, SheetService)
        if self.service.open_id is None:
            return "Please open a sheet before operating it"
        return str(self.service.get_all_values())

    def _replan(self) -> list[Step]:
        """Rewrite every sheet that differs from the target (reshape it, then write all its cells)."""
        assert isinstance(self.service, SheetService) and self.current is not None
        if not self.current.changes_state:
            return self.current.plan[self._cursor :]
        plan: list[Step] = []
        for name, target in self.current.target:
            current = trimmed(self.service.grid_of(name))
            if current == target:
                continue
            plan.append(step(f"Sheet '{name}' is not as it should be; open it.", "open_sheet", sheet_name=name))
            grid = self.service.grid_of(name)
            width = max((len(r) for r in grid), default=0)
            target_width = max((len(r) for r in target), default=1)
            if len(grid) > len(target):
                plan.append(
                    step(
                        "Remove the extra rows.",
                        "delete_batch_data",
                        dimension="row",
                        index_list=list(range(len(target) + 1, len(grid) + 1)),
                    )
                )
            if width > target_width:
                plan.append(
                    step(
                        "Remove the extra columns.",
                        "delete_batch_data",
                        dimension="col",
                        index_list=list(range(target_width + 1, width + 1)),
                    )
                )
            values = [list(r) for r in target]
            plan.append(
                step(
                    "Write the expected values.",
                    "update_range",
                    start_position="A1",
                    end_position=a1(len(target), target_width),
                    values_list=values,
                )
            )
        return plan + [finish_step()]
