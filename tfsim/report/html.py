"""The report page's HTML pieces that every section uses: escaping, numbers and percentages
for cells, tables and figures."""

from __future__ import annotations

import html
import math


def esc(value) -> str:
    """``value`` as text safe inside HTML, quotes included."""
    return html.escape(str(value), quote=True)


def num(value, fmt: str = ",.1f", scale: float = 1.0, missing: str = "n/a") -> str:
    """A number for a table cell; ``missing`` where there is none or it is not finite."""
    if value is None:
        return missing
    value = float(value)
    return format(value * scale, fmt) if math.isfinite(value) else missing


def pct(value, digits: int = 1, sign: bool = False) -> str:
    """A fraction as a percentage; a tiny loss reads +0.0%, not -0.0%."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    return format(round(float(value) * 100, digits) + 0.0, f"{'+' if sign else ''}.{digits}f") + "%"


def table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset(),
          marked: set[int] = frozenset()) -> str:
    """An HTML table; cells are already-escaped strings; ``numeric`` columns align right and
    ``marked`` rows are highlighted."""
    head = "".join(f'<th class="num">{h}</th>' if i in numeric else f"<th>{h}</th>" for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        body.append(f'<tr class="mark">{cells}</tr>' if r in marked else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def figure(fig, *, alt: str) -> str:
    return (f'<figure><img src="{fig.uri}" alt="{esc(alt)}">'
            f"<figcaption>{esc(fig.caption)}</figcaption></figure>")
