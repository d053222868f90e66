"""What an offline search shows: a plain-text leaderboard and a
self-contained HTML report (inline SVG charts, no scripts, no files
beside it, nothing fetched from a network)."""

from __future__ import annotations

import html
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._atomic import atomic_write_text, make_directory

__all__ = ["leaderboard", "write_html_report"]

_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf")


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _param_columns(table: Any) -> List[str]:
    return [c for c in table.columns if c.startswith("param_")]


def _rows(search: Any, n: Optional[int]) -> Tuple[List[str], List[List[str]]]:
    table = search.results_.sort_values("rank")
    if n is not None:
        table = table.head(n)
    label = search.select
    other = [lab for lab, _ in search.scorers if lab != label]
    header = ["rank", "trial", "seed", "epoch"] + [c[len("param_"):] for c in _param_columns(table)] + \
        [label, "interval", "reliable"] + other
    has_truth = "true_return" in table.columns
    if has_truth:
        header += ["true_return", "true_value"]
    header.append("train_s")
    lines = []
    for _, row in table.iterrows():
        line = [str(row["rank"]), str(row["trial"]), str(row["seed"]), str(row["epoch"])]
        line += [_number(row[c]) if not isinstance(row[c], (dict, list)) else str(row[c]) for c in _param_columns(table)]
        line += [_number(row[label]), f"[{_number(row[label + '_lower'])}, {_number(row[label + '_upper'])}]",
                 _number(bool(row["reliable"]))]
        line += [_number(row[lab]) for lab in other]
        if has_truth:
            line += [_number(row["true_return"]), _number(row["true_value"])]
        line.append(f"{row['train_time']:.1f}")
        lines.append(line)
    return header, lines


def leaderboard(search: Any, n: int = 10) -> str:
    """The ``n`` best candidates (rank 1 is the chosen one) as aligned text."""
    header, lines = _rows(search, n)
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header] + lines]
    by = "lower bound" if search.choose_by == "lower" else "estimate"
    text.append(f"chosen: trial {search.results_.loc[search.best_index_, 'trial']}, epoch {search.best_epoch_} "
                f"({search.best_params_}), by the {by} of {search.select}: {_number(search.best_score_)}")
    return "\n".join(text)


# ------------------------------------------------------------------ SVG
class _Axes:
    """A linear map from data to a ``width`` x ``height`` SVG box with margins."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], width: int = 640, height: int = 320) -> None:
        finite_x = [x for x in xs if math.isfinite(x)] or [0.0, 1.0]
        finite_y = [y for y in ys if math.isfinite(y)] or [0.0, 1.0]
        self.x0, self.x1 = min(finite_x), max(finite_x)
        self.y0, self.y1 = min(finite_y), max(finite_y)
        if self.x1 == self.x0:
            self.x0, self.x1 = self.x0 - 0.5, self.x1 + 0.5
        if self.y1 == self.y0:
            self.y0, self.y1 = self.y0 - 0.5, self.y1 + 0.5
        pad = 0.05 * (self.y1 - self.y0)
        self.y0, self.y1 = self.y0 - pad, self.y1 + pad
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = 70, 20, 20, 45

    def x(self, value: float) -> float:
        return self.left + (value - self.x0) / (self.x1 - self.x0) * (self.width - self.left - self.right)

    def y(self, value: float) -> float:
        return self.height - self.bottom - (value - self.y0) / (self.y1 - self.y0) * (self.height - self.top - self.bottom)

    def frame(self, x_label: str, y_label: str) -> List[str]:
        out = [f'<rect x="{self.left}" y="{self.top}" width="{self.width - self.left - self.right}" '
               f'height="{self.height - self.top - self.bottom}" fill="none" stroke="#999"/>']
        for k in range(5):
            xv = self.x0 + k / 4 * (self.x1 - self.x0)
            yv = self.y0 + k / 4 * (self.y1 - self.y0)
            out.append(f'<text x="{self.x(xv):.1f}" y="{self.height - self.bottom + 15}" font-size="11" '
                       f'text-anchor="middle">{_number(float(xv))}</text>')
            out.append(f'<text x="{self.left - 5}" y="{self.y(yv) + 4:.1f}" font-size="11" '
                       f'text-anchor="end">{_number(float(yv))}</text>')
        out.append(f'<text x="{(self.left + self.width - self.right) / 2}" y="{self.height - 8}" font-size="12" '
                   f'text-anchor="middle">{html.escape(x_label)}</text>')
        out.append(f'<text x="14" y="{(self.top + self.height - self.bottom) / 2}" font-size="12" text-anchor="middle" '
                   f'transform="rotate(-90 14 {(self.top + self.height - self.bottom) / 2})">{html.escape(y_label)}</text>')
        return out

    def svg(self, body: List[str]) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}">' + "".join(body) + "</svg>")


def _curves(series: Dict[str, List[Tuple[float, float]]], x_label: str, y_label: str) -> str:
    points = [p for values in series.values() for p in values]
    axes = _Axes([p[0] for p in points], [p[1] for p in points])
    body = axes.frame(x_label, y_label)
    for i, (name, values) in enumerate(series.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        finite = [(x, y) for x, y in values if math.isfinite(y)]
        if not finite:
            continue
        path = " ".join(f"{axes.x(x):.1f},{axes.y(y):.1f}" for x, y in finite)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5">'
                    f"<title>{html.escape(name)}</title></polyline>")
    return axes.svg(body)


def _intervals(rows: List[Dict[str, Any]], y_label: str) -> str:
    """One vertical bar per candidate (estimate and interval), the chosen
    one in red, true values (when known) as open circles."""
    values = [r["value"] for r in rows] + [r["lower"] for r in rows] + [r["upper"] for r in rows] + \
        [r["truth"] for r in rows if r["truth"] is not None]
    axes = _Axes([0.0, float(max(1, len(rows) - 1))], values)
    body = axes.frame("candidates (by rank)", y_label)
    for i, r in enumerate(rows):
        x = axes.x(float(i))
        colour = "#d62728" if r["chosen"] else ("#1f77b4" if r["reliable"] else "#aaaaaa")
        if math.isfinite(r["lower"]) and math.isfinite(r["upper"]):
            body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{axes.y(r["lower"]):.1f}" y2="{axes.y(r["upper"]):.1f}" '
                        f'stroke="{colour}"/>')
        if math.isfinite(r["value"]):
            body.append(f'<circle cx="{x:.1f}" cy="{axes.y(r["value"]):.1f}" r="3" fill="{colour}">'
                        f"<title>{html.escape(r['name'])}</title></circle>")
        if r["truth"] is not None and math.isfinite(r["truth"]):
            body.append(f'<circle cx="{x:.1f}" cy="{axes.y(r["truth"]):.1f}" r="4" fill="none" stroke="#2ca02c"/>')
    return axes.svg(body)


def _scatter(points: List[Tuple[float, float, bool, str]], x_label: str, y_label: str) -> str:
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    axes = _Axes(xs + ys, xs + ys, width=420, height=400)  # the same scale on both axes: y = x is the diagonal
    body = axes.frame(x_label, y_label)
    low, high = axes.x0, axes.x1
    body.append(f'<line x1="{axes.x(low):.1f}" y1="{axes.y(low):.1f}" x2="{axes.x(high):.1f}" y2="{axes.y(high):.1f}" '
                'stroke="#ccc" stroke-dasharray="4"/>')
    for x, y, chosen, name in points:
        if math.isfinite(x) and math.isfinite(y):
            colour = "#d62728" if chosen else "#1f77b4"
            body.append(f'<circle cx="{axes.x(x):.1f}" cy="{axes.y(y):.1f}" r="{5 if chosen else 3}" fill="{colour}">'
                        f"<title>{html.escape(name)}</title></circle>")
    return axes.svg(body)


def _table(header: List[str], lines: List[List[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>" for line in lines)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _name(row: Any) -> str:
    return f"trial {row['trial']} seed {row['seed']} epoch {row['epoch']}"


def write_html_report(search: Any, path: str) -> str:
    """Write the report of a fitted search to ``path`` (atomically); returns ``path``."""
    table = search.results_
    label = search.select
    ranked = table.sort_values("rank")
    chosen = table.loc[search.best_index_]
    sections = []
    by = "lower confidence bound" if search.choose_by == "lower" else "estimate"
    summary = [
        ("algorithm", type(search.config).__name__),
        ("candidates", f"{len(table)} (trials: {table['trial'].nunique()}, seeds: {list(search.seeds)}, "
                       f"a checkpoint every {search.n_steps_per_epoch} of {search.n_steps} steps)"),
        ("scorers", ", ".join(lab for lab, _ in search.scorers) + f"; chosen by the {by} of {label}"),
        ("held-out episodes", f"{search.test_dataset_.size()} of {search.train_dataset_.size() + search.test_dataset_.size()}"),
        ("chosen", f"{_name(chosen)}, {search.best_params_}"),
        (label, f"{_number(chosen[label])} [{_number(chosen[label + '_lower'])}, {_number(chosen[label + '_upper'])}]"
                f"{'' if chosen['reliable'] else ' (UNRELIABLE: no candidate was reliable)'}"),
    ]
    if "true_return" in table.columns:
        best_true = table["true_return"].max()
        summary.append(("true return", f"{_number(chosen['true_return'])} (best candidate: {_number(best_true)}; "
                                       f"regret {_number(best_true - chosen['true_return'])}); recorded, not used to choose"))
    sections.append("<h2>Summary</h2>" + _table(["", ""], [[k, v] for k, v in summary]))

    header, lines = _rows(search, 20)
    sections.append("<h2>Leaderboard (best 20)</h2>" + _table(header, lines))

    interval_rows = [{"value": float(r[label]), "lower": float(r[label + "_lower"]), "upper": float(r[label + "_upper"]),
                      "reliable": bool(r["reliable"]), "chosen": bool(r["chosen"]), "name": _name(r),
                      "truth": float(r["true_value"]) if "true_value" in table.columns else None}
                     for _, r in ranked.iterrows()]
    sections.append(f"<h2>Estimates with intervals ({html.escape(label)})</h2><p>One bar per candidate in rank order: "
                    "red the chosen one, blue reliable, grey unreliable; green circles the true discounted value "
                    "when an environment was given.</p>" + _intervals(interval_rows, label))

    curves: Dict[str, List[Tuple[float, float]]] = {}
    for trial, group in table.sort_values("step").groupby("trial"):
        curves[f"trial {trial}"] = [(float(s), float(v)) for s, v in zip(group["step"], group[label])]
    sections.append(f"<h2>{html.escape(label)} at each checkpoint</h2><p>One line per trial.</p>"
                    + _curves(curves, "gradient steps", label))
    losses = [c for c in table.columns if c.startswith("train_") and c != "train_time"]
    if losses:
        loss = losses[0]
        curves = {f"trial {trial}": [(float(s), float(v)) for s, v in zip(group["step"], group[loss])]
                  for trial, group in table.sort_values("step").groupby("trial")}
        sections.append(f"<h2>Learning curves ({html.escape(loss[len('train_'):])})</h2><p>The epoch's mean training "
                        "loss, one line per trial.</p>" + _curves(curves, "gradient steps", loss[len("train_"):]))
    if "true_value" in table.columns:
        points = [(float(r["true_value"]), float(r[label]), bool(r["chosen"]), _name(r)) for _, r in table.iterrows()]
        sections.append("<h2>Estimated against true</h2><p>x: the discounted return measured in the environment; "
                        f"y: the {html.escape(label)} estimate; the dashed line is y = x; red the chosen candidate.</p>"
                        + _scatter(points, "true discounted value", label))
    all_header, all_lines = _rows(search, None)
    sections.append("<details><summary>Every candidate</summary>" + _table(all_header, all_lines) + "</details>")
    style = ("body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}th{background:#f4f4f4}")
    title = f"offrl search: {html.escape(search.study_name)}"
    text = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>{style}</style></head>"
            f"<body><h1>{title}</h1>" + "".join(sections) + "</body></html>\n")
    make_directory(os.path.dirname(os.path.abspath(path)))
    atomic_write_text(path, text)
    return path
