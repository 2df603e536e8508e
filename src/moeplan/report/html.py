"""HTML report: tables and plotly figures in one page that works offline.

plotly.js (4.8 MB) is written once beside the page as :data:`PLOTLY_FILE` and loaded from
there, not inlined: the page itself stays small (well under 1 MB). Each figure is one
``Plotly.newPlot`` call with its data compacted — numbers to :data:`DIGITS` significant digits,
plotly's typed-array encoding expanded, the layout template shared once. No network address
is referenced, so the folder opens from disk with no network; without ``plotly.min.js`` next
to it the page says so where the charts would be.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PLOTLY_FILE = "plotly.min.js"
#: Significant digits of every number drawn: the figures show at most 4 (axis ticks and hover
#: text), and fewer digits keep a report of thousands of points small.
DIGITS = 4

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


def plotly_js() -> str:
    """The plotly.js bundle of the installed plotly package (written beside the report)."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def compact(o: Any) -> Any:
    """Plotly figure JSON with every number to :data:`DIGITS` significant digits and typed
    arrays (``{"dtype", "bdata"}``) expanded into lists."""
    if isinstance(o, dict):
        if "bdata" in o and "dtype" in o:
            arr = np.frombuffer(base64.b64decode(o["bdata"]), dtype=np.dtype(o["dtype"]))
            if "shape" in o:
                shape = o["shape"]
                arr = arr.reshape(
                    [int(x) for x in str(shape).split(",")] if isinstance(shape, str) else shape
                )
            return compact(arr.tolist())
        return {k: compact(v) for k, v in o.items()}
    if isinstance(o, list):
        return [compact(v) for v in o]
    if isinstance(o, float) and np.isfinite(o):
        r = float(f"{o:.{DIGITS}g}")
        return int(r) if r.is_integer() and abs(r) < 1e15 else r
    return o


def _dumps(o: Any) -> str:
    """Compact JSON safe inside a <script> element."""
    text = json.dumps(o, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/")


def figure_html(fig: Any, div_id: str) -> tuple[str, dict[str, Any] | None]:
    """A figure's div and script (its layout template returned apart, to be shared)."""
    d = json.loads(fig.to_json())
    layout = d.get("layout", {})
    template = layout.pop("template", None)
    height = layout.get("height") or 450
    data, lay = _dumps(compact(d.get("data", []))), _dumps(compact(layout))
    script = (
        f"if(window.Plotly){{const L={lay};L.template=window.MT;"
        f'Plotly.newPlot("{div_id}",{data},L,{{"displaylogo":false,"responsive":true}});}}'
    )
    div = f'<div id="{div_id}" class="plotly-graph-div" style="height:{height}px;width:100%"></div>'
    return div + f"<script>{script}</script>", template


def _scripts_head(template: dict[str, Any] | None) -> str:
    """plotly.js from beside the page, the shared template, and a note when it is missing."""
    missing = (
        f"Charts need {PLOTLY_FILE}, written beside this report by moeplan plan; "
        "keep the two files together."
    )
    return (
        f'<script src="{PLOTLY_FILE}"></script><script>window.MT={_dumps(template or {})};'
        "document.addEventListener('DOMContentLoaded',()=>{if(!window.Plotly)"
        "document.querySelectorAll('.figure').forEach(e=>{e.textContent="
        f"{_dumps(missing)};e.className='figure note';}});}});</script>"
    )


def render(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """The whole page as one string."""
    parts = []
    template = None
    for n, s in enumerate(sections):
        inner = [f"<h2>{html.escape(s.title)}</h2>"]
        inner += [f'<p class="lead">{html.escape(p)}</p>' for p in s.paragraphs]
        inner += [_table_html(*t) for t in s.tables]
        figs = []
        for k, fig in enumerate(s.figures):
            body, tpl = figure_html(fig, f"fig-{n}-{k}")
            template = template or tpl
            figs.append(f'<div class="figure">{body}</div>')
        if figs:
            cls = "grid" if s.side_by_side and len(figs) > 1 else ""
            inner.append(f'<div class="{cls}">{"".join(figs)}</div>')
        parts.append(f"<section>{''.join(inner)}</section>")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>{_scripts_head(template)}"
        "</head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p></header>"
        f"<main>{''.join(parts)}</main></body></html>"
    )
