"""The HTML report of a chaos run: the verdict, throughput and latency over time with the fault
windows shaded, election times, and the fault list. One self-contained file; the plots are inline
SVG drawn here (no plotting library)."""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict

from chaos.checker import fault_windows, latencies

W, H = 960, 260
ML, MR, MT, MB = 60, 20, 16, 34
COLORS = {"kill": "#e4572e", "pause": "#f3a712", "partition": "#4c6ef5", "clock": "#29a36a"}
SERIES = ["#222222", "#c92a2a", "#1c7ed6", "#2b8a3e"]


def _esc(s) -> str:
    return html.escape(str(s), quote=True)


def _nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def chart(series: list[tuple[str, list[tuple[float, float]]]], windows: list[dict], xmax: float, ylabel: str,
          log_y: bool = False, points: bool = False) -> str:
    """Lines (or points) over time, fault windows shaded behind them."""
    ys = [y for _, pts in series for _, y in pts if y is not None and (y > 0 or not log_y)]
    if log_y:
        lo = 10 ** math.floor(math.log10(min(ys))) if ys else 1
        hi = 10 ** math.ceil(math.log10(max(ys))) if ys else 10
        if hi <= lo:
            hi = lo * 10

        def fy(y):
            return MT + (H - MT - MB) * (1 - (math.log10(max(y, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))
        yticks = [10 ** e for e in range(int(math.log10(lo)), int(math.log10(hi)) + 1)]
    else:
        lo, hi = 0.0, (max(ys) * 1.1 if ys else 1.0) or 1.0

        def fy(y):
            return MT + (H - MT - MB) * (1 - (y - lo) / (hi - lo))
        yticks = _nice_ticks(lo, hi)
    xmax = max(xmax, 1.0)

    def fx(x):
        return ML + (W - ML - MR) * x / xmax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="11">']
    for w in windows:
        x0, x1 = fx(w["start"]), fx(w["stop"] if w["stop"] is not None else xmax)
        out.append(f'<rect x="{x0:.1f}" y="{MT}" width="{max(1.0, x1 - x0):.1f}" height="{H - MT - MB}" '
                   f'fill="{COLORS.get(w["kind"], "#999")}" fill-opacity="0.18"><title>{_esc(w["desc"])} '
                   f'({w["start"]:.1f}s - {w["stop"] if w["stop"] is not None else "end"}s)</title></rect>')
    for t in yticks:
        y = fy(t)
        if MT - 0.5 <= y <= H - MB + 0.5:
            label = f"{t:g}"
            out.append(f'<line x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                       f'<text x="{ML - 4}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for t in _nice_ticks(0, xmax, 10):
        x = fx(t)
        if x <= W - MR + 0.5:
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{H - MB}" y2="{H - MB + 4}" stroke="#555"/>'
                       f'<text x="{x:.1f}" y="{H - MB + 16}" text-anchor="middle">{t:g}s</text>')
    out.append(f'<line x1="{ML}" x2="{W - MR}" y1="{H - MB}" y2="{H - MB}" stroke="#555"/>'
               f'<line x1="{ML}" x2="{ML}" y1="{MT}" y2="{H - MB}" stroke="#555"/>'
               f'<text x="14" y="{(H - MB + MT) / 2:.0f}" transform="rotate(-90 14 {(H - MB + MT) / 2:.0f})" '
               f'text-anchor="middle">{_esc(ylabel)}</text>')
    for i, (name, pts) in enumerate(series):
        color = SERIES[i % len(SERIES)]
        pts = [(x, y) for x, y in pts if y is not None and (y > 0 or not log_y)]
        if points:
            for x, y in pts:
                out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{color}">'
                           f'<title>{_esc(name)}: {y:.3f} at {x:.1f}s</title></circle>')
        elif pts:
            d = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="1.4"/>')
        out.append(f'<rect x="{W - MR - 170}" y="{MT + 4 + 14 * i}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{W - MR - 155}" y="{MT + 13 + 14 * i}">{_esc(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def per_second(history: list[dict], end: float):
    n = int(end) + 1
    ok = [0] * n
    fail = [0] * n
    polled = [0] * n
    for op in history:
        t = op.get("t") or 0
        i = min(n - 1, max(0, int(t)))
        if op.get("f") == "send":
            if op.get("type") == "ok":
                ok[i] += 1
            elif op.get("type") in ("fail", "info"):
                fail[i] += 1
        elif op.get("f") == "poll":
            polled[i] += len(op.get("msgs", ()))
    return ok, fail, polled


def latency_series(history: list[dict], end: float):
    bins: dict[int, list[float]] = defaultdict(list)
    for t, lat in latencies(history):
        bins[int(t)].append(lat * 1000)
    med, p99, mx = [], [], []
    for i in sorted(bins):
        xs = sorted(bins[i])
        med.append((i + 0.5, xs[len(xs) // 2]))
        p99.append((i + 0.5, xs[min(len(xs) - 1, int(0.99 * (len(xs) - 1) + 0.5))]))
        mx.append((i + 0.5, xs[-1]))
    return med, p99, mx


def _table(rows: list[list], head: list[str]) -> str:
    h = "".join(f"<th>{_esc(x)}</th>" for x in head)
    body = "".join("<tr>" + "".join(f"<td>{_esc(x)}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _stat(s: dict) -> list:
    def f(x):
        return "-" if x is None else f"{x:.3f}"
    return [s["count"], f(s["median"]), f(s["p99"]), f(s["max"])]


def render(verdict: dict, history: list[dict]) -> str:
    end = max((op.get("t") or 0 for op in history), default=1.0)
    wins = fault_windows(history)
    ok, fail, polled = per_second(history, end)
    med, p99, mx = latency_series(history, end)
    el = verdict["elections"]
    meta = verdict.get("meta", {})
    valid = verdict["valid"] and not verdict.get("harness-error")
    title = "VALID" if valid else ("HARNESS ERROR" if verdict.get("harness-error") and verdict["valid"]
                                   else "ANOMALIES: " + ", ".join(verdict["anomaly-types"]))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>krafty chaos report</title><style>",
        "body{font-family:sans-serif;margin:24px;max-width:1000px} table{border-collapse:collapse;margin:8px 0}",
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left} h2{margin-top:28px}",
        ".ok{color:#2b8a3e} .bad{color:#c92a2a} pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}",
        ".legend span{display:inline-block;padding:2px 8px;margin-right:6px;font-size:12px}",
        "</style></head><body>",
        f"<h1>krafty chaos run: <span class='{'ok' if valid else 'bad'}'>{_esc(title)}</span></h1>",
        _table([[k, json.dumps(v) if isinstance(v, list | dict) else v] for k, v in meta.items()], ["run", "value"]),
        "<div class='legend'>fault windows: " + "".join(
            f"<span style='background:{c}33'>{k}</span>" for k, c in COLORS.items()) + "</div>",
        "<h2>Throughput</h2>",
        chart([("acknowledged writes/s", [(i + 0.5, v) for i, v in enumerate(ok)]),
               ("failed writes/s", [(i + 0.5, v) for i, v in enumerate(fail)]),
               ("records polled/s", [(i + 0.5, v) for i, v in enumerate(polled)])], wins, end, "per second"),
        "<h2>Produce latency (acks=all, invoke to acknowledgement)</h2>",
        chart([("median", med), ("p99", p99), ("max", mx)], wins, end, "ms (log scale)", log_y=True),
        "<h2>Leader elections (fault to a new live leader)</h2>",
        _table([["controller (metadata quorum)", *_stat(el["controller"])],
                ["partition leaders", *_stat(el["partition"])]], ["what", "count", "median s", "p99 s", "max s"]),
        f"<p>Faults that healed before a new leader showed up: {_esc(el.get('healed_first'))}</p>",
    ]
    start = {w["id"]: w["start"] for w in wins}
    c_pts = [(start.get(e["fault"], 0), e["seconds"]) for e in el["events"] if e["what"] == "controller"]
    p_pts = [(start.get(e["fault"], 0), e["seconds"]) for e in el["events"] if e["what"] != "controller"]
    parts.append(chart([("controller", c_pts), ("partition leader", p_pts)], wins, end, "seconds", points=True))
    parts.append("<h2>Checks</h2>")
    rows = [[k, "ok" if not v else f"{len(v)} example(s)"] for k, v in verdict["anomalies"].items()]
    parts.append(_table(rows, ["check", "result"]))
    for k in verdict["anomaly-types"]:
        parts.append(f"<h3 class='bad'>{_esc(k)}</h3><pre>{_esc(json.dumps(verdict['anomalies'][k], indent=1))}</pre>")
    if verdict.get("resent-after-epoch-bump"):
        parts.append("<h3>client re-sends (not a broker anomaly)</h3><p>values written once in each of two epochs of "
                     "one producer: the client sent them again after bumping its epoch (librdkafka #4953)</p>"
                     f"<pre>{_esc(json.dumps(verdict['resent-after-epoch-bump'], indent=1))}</pre>")
    if verdict.get("harness-error"):
        parts.append(f"<h3 class='bad'>harness error</h3><pre>{_esc(verdict['harness-error'])}</pre>")
    parts.append("<h2>Counts</h2>")
    parts.append(_table([[k, v] for k, v in verdict["counts"].items()], ["what", "count"]))
    parts.append("<h2>Faults</h2>")
    outages = {o["fault"]: o["max_ack_gap_s"] for o in verdict.get("outages", [])}
    parts.append(_table([[w["id"], w["kind"], w["desc"], f"{w['start']:.1f}",
                          "-" if w["stop"] is None else f"{w['stop']:.1f}", outages.get(w["id"], "-")]
                         for w in wins], ["id", "kind", "what", "start s", "healed s", "longest write gap s"]))
    parts.append("</body></html>")
    return "\n".join(parts)
