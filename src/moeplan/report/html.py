"""Self-contained HTML report: tables and plotly figures in one file that works offline.

plotly.js is inlined once (``include_plotlyjs=True`` on the first figure); later figures
reuse it. No external CSS, fonts or scripts are referenced, so the file opens from disk
with no network.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#1d2230;
background:#f6f7fb}
header{background:#1d2230;color:#fff;padding:18px 32px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#c8cde0}
main{max-width:1280px;margin:0 auto;padding:16px 32px 48px}
section{background:#fff;border-radius:10px;box-shadow:0 1px 3px rgba(0,0,0,.08);
margin:18px 0;padding:16px 22px}
h2{font-size:18px;margin:4px 0 10px} p.lead{font-size:15px;line-height:1.5}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e6e8ef}
th{background:#f0f2f8} tr.win td{background:#eaf7ee;font-weight:600}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.note{color:#5b6275;font-size:13px} code{background:#f0f2f8;padding:1px 4px;border-radius:4px}
.figure{min-height:200px}
"""


@dataclass
class Section:
    """A report section: a title, paragraphs, tables (rows of cells) and figures."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[Any]], int | None]] = field(default_factory=list)
    figures: list[Any] = field(default_factory=list)  # plotly Figure objects
    side_by_side: bool = False

    def table(self, header: list[str], rows: list[list[Any]], highlight: int | None = None) -> None:
        self.tables.append((header, rows, highlight))


def _table_html(header: Sequence[str], rows: Sequence[Sequence[Any]], highlight: int | None) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = ' class="win"' if highlight == i else ""
        cells = "".join(f"<td>{html.escape(str(c))}</td>" for c in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """The whole page as one string."""
    parts = []
    first = True
    for n, s in enumerate(sections):
        inner = [f"<h2>{html.escape(s.title)}</h2>"]
        inner += [f'<p class="lead">{html.escape(p)}</p>' for p in s.paragraphs]
        inner += [_table_html(*t) for t in s.tables]
        figs = []
        for k, fig in enumerate(s.figures):
            figs.append(
                '<div class="figure">'
                + fig.to_html(
                    full_html=False,
                    include_plotlyjs=first,
                    div_id=f"fig-{n}-{k}",
                    config={"displaylogo": False, "responsive": True},
                )
                + "</div>"
            )
            first = False
        if figs:
            cls = "grid" if s.side_by_side and len(figs) > 1 else ""
            inner.append(f'<div class="{cls}">{"".join(figs)}</div>')
        parts.append(f"<section>{''.join(inner)}</section>")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p></header>"
        f"<main>{''.join(parts)}</main></body></html>"
    )
