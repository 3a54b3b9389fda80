"""Plain-text tables for the terminal and for logs, drawn by ``rich`` (one table library for every CLI).

The tables are rendered to a string, not to the live terminal: the CLIs print them, tests read them, and the
trainer sends them to stderr or a log file. So no colour, no markup (an install hint such as
``agentgym-rl[babyai]`` is not a style tag), no wrapping to the terminal's width, and ASCII rules that a
cp1252 console or a plain log viewer shows as they are.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Literal

Justify = Literal["left", "right", "center"]

# Wide enough that no table of ours is ever wrapped or cut: the widest (`agentgym list` with install hints)
# is ~150 columns. Rich sizes a non-expanding table to its content, so this is only an upper bound.
RENDER_WIDTH = 10_000

# rich's box.SIMPLE (a rule under the header and above the footer, no vertical lines) drawn in ASCII.
_ASCII_SIMPLE_SPEC = (
    "    \n"
    "    \n"
    " -- \n"
    "    \n"
    "    \n"
    " -- \n"
    "    \n"
    "    \n"
)


def render_table(
    header: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    justify: Sequence[Justify] | None = None,
    footer: Sequence[str] | None = None,
    column_gap: int = 2,
) -> str:
    """The table as text: header, a rule, the rows, and (when given) a rule and a footer row such as totals.

    ``justify`` gives each column's alignment (default: left); cells are taken as plain text. Lines carry no
    trailing spaces.
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    justify = list(justify or ["left"] * len(header))
    if len(justify) != len(header) or (footer is not None and len(footer) != len(header)):
        raise ValueError("justify and footer need one entry per column")
    table = Table(
        box=box.Box(_ASCII_SIMPLE_SPEC, ascii=True),
        show_edge=False,
        pad_edge=False,
        padding=(0, column_gap // 2, 0, column_gap - column_gap // 2),
        collapse_padding=True,
        show_footer=footer is not None,
        highlight=False,
    )
    for index, (title, alignment) in enumerate(zip(header, justify)):
        table.add_column(
            Text(title),
            footer=Text(footer[index]) if footer is not None else "",
            justify=alignment,
            no_wrap=True,  # (overflow="ignore" would also drop the justification: rich applies neither then)
        )
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells for {len(header)} columns: {row!r}")
        table.add_row(*(Text(cell) for cell in row))
    buffer = io.StringIO()
    console = Console(file=buffer, width=RENDER_WIDTH, color_system=None, force_terminal=False,
                      force_jupyter=False, legacy_windows=False, markup=False, emoji=False, highlight=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
