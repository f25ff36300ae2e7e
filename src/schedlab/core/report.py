"""The reproduce report: Markdown, a self-contained HTML page, Parquet and CSV.

Both documents open on one row per system (claims holding k/n, sanity checks passing m/m, the
strongest peer's win / tie / lose, real data or a seeded stand-in), with links to each system's
section; then *What ran*, one line per experiment, a seeded stand-in marked apart from real data
in words and colour. Each system's section opens with its head-to-head table (strongest peer |
our figure | its figure | win / tie / lose), then its claims and sanity checks, then each
experiment's notes and figures. Every file is written atomically, so an interrupted run leaves
either the previous report or the new one, never half of either.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import re
from pathlib import Path

import polars as pl

from schedlab import __version__
from schedlab.core.experiment import (
    CLAIM_COLUMNS,
    Figure,
    Run,
    Sweep,
    claims_frame,
    count_claims,
    measurements_frame,
    ran_with_text,
    runs_of,
)
from schedlab.core.io import ensure_directory, write_bytes, write_frame, write_text


def format_figure(value: float, ci: float | None = None) -> str:
    if value != value:
        return "n/a"
    text = f"{value:.4g}"
    if ci and ci == ci and ci > 1e-9 * max(abs(value), 1e-300):  # not float noise
        text += f" ± {ci:.2g}"
    return text


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "figure"


def _report_figures(sweep: Sweep) -> list[tuple[str, str, Figure]]:
    """Figures of the first seed of each experiment: (section key, file name, figure)."""
    seen: set[str] = set()
    picked = []
    for result in sweep.results:
        key = f"{result.system}.{result.experiment}"
        if key in seen:
            continue
        seen.add(key)
        for fig in result.figures:
            picked.append((key, f"{_slug(key)}--{_slug(fig.name)}.png", fig))
    return picked


_VERDICT_RANK = {"lose": 0, "tie": 1, "win": 2}


def _advantage(row: dict) -> float:
    """Our figure's relative lead over the peer's (negative: behind), for ordering peers."""
    ours, peer = row["our_figure"], row["peer_figure"]
    lead = (ours - peer) / abs(peer) if peer else ours - peer
    return -lead if row["lower_is_better"] else lead


def peer_rows(claims: pl.DataFrame, system: str) -> list[dict]:
    """The system's head-to-head rows (kind ``claim``, a named baseline, both figures), the
    strongest peer first: the one we lose to, else tie with, else beat by the smallest margin."""
    rows = [r for r in claims.filter(pl.col("system") == system).iter_rows(named=True)
            if r["kind"] == "claim" and r["baseline"] and r["verdict"]]
    return sorted(rows, key=lambda r: (_VERDICT_RANK[r["verdict"]], _advantage(r)))


def _data_of(runs: list[Run]) -> str:
    """The system's data in words: real, a stand-in (k of n experiments), or generated."""
    ran = [r for r in runs if r.status == "ran"]
    stand_ins = sum(r.data == "stand-in" for r in ran)
    if stand_ins:
        return f"seeded stand-in ({stand_ins} of {len(ran)} experiments)"
    real = sum(r.data == "real" for r in ran)
    if real:
        return "real data" if real == len(ran) else (
            f"real data ({real} of {len(ran)} experiments; the rest generated)")
    if any(r.data == "generated" for r in ran):
        return "generated workload"
    return "not said" if ran else "nothing ran"


def system_summary(claims: pl.DataFrame, runs: list[Run]) -> list[dict]:
    """One row per system: claims k/n, sanity m/m, strongest peer and verdict, data."""
    systems = list(dict.fromkeys([*(r.system for r in runs), *claims["system"].to_list()]))
    rows = []
    for system in systems:
        counts = count_claims(claims.filter(pl.col("system") == system))
        peers = peer_rows(claims, system)
        mine = [r for r in runs if r.system == system]
        rows.append(dict(system=system, counts=counts,
                         peer=peers[0]["baseline"] if peers else "",
                         verdict=peers[0]["verdict"] if peers else "",
                         data=_data_of(mine),
                         stand_in=any(r.data == "stand-in" for r in mine),
                         not_ran=sum(r.status != "ran" for r in mine)))
    return rows


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")


def _anchor(system: str) -> str:
    return f"system-{_slug(system)}"


def _figures_pair(row: dict) -> tuple[str, str]:
    return (format_figure(row["our_figure"], row["our_ci95"]),
            format_figure(row["peer_figure"], row["peer_ci95"]))


def _summary_markdown(summary: list[dict]) -> list[str]:
    lines = ["| system | claims hold | sanity checks pass | strongest peer | vs it | data |",
             "|---|---|---|---|---|---|"]
    for row in summary:
        c = row["counts"]
        data = f"**{row['data']}**" if row["stand_in"] else row["data"]
        lines.append(f"| [{row['system']}](#{_anchor(row['system'])}) | "
                     f"{c.claims_holding}/{c.claims} | {c.sanity_passing}/{c.sanity} | "
                     f"{_md(row['peer']) or '—'} | {row['verdict'] or '—'} | {data} |")
    return lines


def _runs_markdown(runs: list[Run]) -> list[str]:
    lines = []
    for run in runs:
        text = _md(run.sentence) if run.status == "ran" else f"**{_md(run.sentence)}**"
        label = run.data_label
        mark = f"**{label.upper()}**" if run.data == "stand-in" else label
        lines.append(f"- `{run.system}.{run.experiment}` ({run.seeds} seed"
                     f"{'s' if run.seeds != 1 else ''}){f' [{mark}]' if mark else ''}: {text}")
    return lines


def _peers_markdown(peers: list[dict]) -> list[str]:
    if not peers:
        return ["No head-to-head figure against a named peer in this run.", ""]
    lines = ["| strongest peer | on | our figure | its figure | win / tie / lose |",
             "|---|---|---|---|---|"]
    for row in peers:
        ours, theirs = _figures_pair(row)
        lines.append(f"| {_md(row['baseline'])} | {_md(row['figure_metric'])} | {ours} | "
                     f"{theirs} | {row['verdict']} |")
    return [*lines, ""]


def _claims_markdown(claims: pl.DataFrame) -> list[str]:
    lines = ["| kind | paper's claim | baseline | paper | target | our figure | seeds holding "
             "| holds |", "|---|---|---|---|---|---|---|---|"]
    for row in claims.iter_rows(named=True):
        mark = "yes" if row["holds"] else "**no**"
        target = f"{row['comparison']} {format_figure(row['target'])}"
        ours = format_figure(row["measured"], row["measured_ci95"])
        lines.append(f"| {row['kind']} | {_md(row['claim'])} | {_md(row['baseline']) or '—'} | "
                     f"{_md(row['paper_figure'])} | {target} | {ours} | "
                     f"{row['seeds_holding']}/{row['seeds']} | {mark} |")
    return lines


def _results_by_experiment(sweep: Sweep, system: str) -> dict[str, list]:
    keyed: dict[str, list] = {}
    for r in sweep.results:
        if r.system == system:
            keyed.setdefault(f"{r.system}.{r.experiment}", []).append(r)
    return keyed


def render_markdown(sweep: Sweep, claims: pl.DataFrame, figures, command: str,
                    runs: list[Run] | None = None) -> str:
    runs = runs if runs is not None else runs_of(sweep)
    summary = system_summary(claims, runs)
    lines = [
        "# schedlab reproduce report", "",
        f"schedlab {__version__}, scale `{sweep.scale}`, seeds {sweep.seeds}, "
        f"generated {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        f"Regenerate with `{command}`.", "",
        f"**{count_claims(claims).sentence}**; "
        f"{sum(r.status == 'ran' for r in runs)} of {len(runs)} experiments ran. Figures are "
        "means over seeds (± 95% CI); a claim holds when its mean meets the target and so do at "
        "least two thirds of its seeds. A *claim* is compared with the paper's figure; a "
        "*sanity* row is a correctness check or holds by construction. *vs it*: win / tie / "
        "lose against the strongest peer (tie: the paired difference's 95% CI spans 0).", "",
        "## Systems", "",
        *_summary_markdown(summary), "",
        "## What ran", "",
        *_runs_markdown(runs), "",
    ]
    if sweep.failures:
        lines += ["## Failed experiments", ""]
        lines += [f"- {f.system}.{f.experiment} seed {f.seed}: {f.error}" for f in sweep.failures]
        lines.append("")
    for row in summary:
        system = row["system"]
        mine = claims.filter(pl.col("system") == system)
        lines += [f'<a id="{_anchor(system)}"></a>', "", f"## {system}", "",
                  f"{row['counts'].sentence}; data: {row['data']}.", "",
                  *_peers_markdown(peer_rows(claims, system))]
        if mine.height:
            lines += ["### Claims", "", *_claims_markdown(mine), ""]
        for key, results in _results_by_experiment(sweep, system).items():
            seconds = sum(r.seconds for r in results) / len(results)
            lines += [f"### {key}", "", f"{len(results)} seed(s), {seconds:.1f} s per seed.", ""]
            if results[0].notes:
                lines += [ran_with_text([results[0].notes]), ""]
            for section, name, fig in figures:
                if section == key:
                    lines += [f"![{fig.caption or fig.name}](figures/{name})", "",
                              f"*{fig.caption}*" if fig.caption else "", ""]
    return "\n".join(lines).rstrip() + "\n"


def _cells(values, cls: str = "") -> str:
    attr = f" class='{cls}'" if cls else ""
    return "".join(f"<td{attr}>{html.escape(str(v))}</td>" for v in values)


def _html_summary(summary: list[dict]) -> str:
    rows = []
    for row in summary:
        c = row["counts"]
        data_cls = "standin" if row["stand_in"] else (
            "real" if row["data"].startswith("real data") else "gen")
        claims_cls = "ok" if c.claims and c.claims_holding == c.claims else ""
        sanity_cls = "" if not c.sanity else ("ok" if c.sanity_passing == c.sanity else "bad")
        rows.append(
            f"<tr><td><a href='#{_anchor(row['system'])}'>{html.escape(row['system'])}</a></td>"
            f"<td class='{claims_cls}'>{c.claims_holding}/{c.claims}</td>"
            f"<td class='{sanity_cls}'>{c.sanity_passing}/{c.sanity}</td>"
            f"{_cells([row['peer'] or '—'])}"
            f"<td class='v-{row['verdict'] or 'none'}'>{row['verdict'] or '—'}</td>"
            f"<td><span class='tag {data_cls}'>{html.escape(row['data'])}</span></td></tr>")
    return ("<table class='summary'><thead><tr><th>system</th><th>claims hold</th>"
            "<th>sanity checks pass</th><th>strongest peer</th><th>vs it</th><th>data</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _html_runs(runs: list[Run]) -> str:
    items = []
    for r in runs:
        cls = {"real": "real", "stand-in": "standin", "generated": "gen"}.get(r.data, "")
        tag = f"<span class='tag {cls}'>{html.escape(r.data_label)}</span> " if cls else ""
        status = "" if r.status == "ran" else " class='bad'"
        items.append(
            f"<li class='run {cls or 'none'}'><code>{html.escape(f'{r.system}.{r.experiment}')}"
            f"</code> <small>({r.seeds} seed{'s' if r.seeds != 1 else ''})</small> {tag}"
            f"<span{status}>{html.escape(r.sentence)}</span></li>")
    return f"<ul class='runs'>{''.join(items)}</ul>"


def _html_peers(peers: list[dict]) -> str:
    if not peers:
        return "<p class='peers none'>No head-to-head figure against a named peer in this run.</p>"
    rows = "".join(
        f"<tr>{_cells([r['baseline'], r['figure_metric'], *_figures_pair(r)])}"
        f"<td class='v-{r['verdict']}'>{r['verdict']}</td></tr>" for r in peers)
    return ("<table class='peers'><thead><tr><th>strongest peer</th><th>on</th>"
            "<th>our figure</th><th>its figure</th><th>win / tie / lose</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def _html_claims(claims: pl.DataFrame) -> str:
    rows = []
    for row in claims.iter_rows(named=True):
        cls = "ok" if row["holds"] else "bad"
        rows.append(
            f"<tr class='{row['kind']}'>" + _cells([
                row["kind"], row["claim"], row["baseline"] or "—", row["paper_figure"],
                f"{row['comparison']} {format_figure(row['target'])}",
                format_figure(row["measured"], row["measured_ci95"]),
                f"{row['seeds_holding']}/{row['seeds']}"])
            + f"<td class='{cls}'>{'yes' if row['holds'] else 'no'}</td></tr>")
    return ("<table class='claims'><thead><tr><th>kind</th><th>paper's claim</th>"
            "<th>baseline</th><th>paper</th><th>target</th><th>our figure</th>"
            "<th>seeds holding</th><th>holds</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


_CSS = """
body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse;width:100%;margin:.5rem 0 1rem}
td,th{border:1px solid #ccc;padding:.3rem .5rem;vertical-align:top}th{background:#f3f3f3}
.ok{color:#116611;font-weight:bold}.bad{color:#aa1111;font-weight:bold}
.v-win{color:#116611;font-weight:bold}.v-lose{color:#aa1111;font-weight:bold}
.v-tie{color:#7a5a00;font-weight:bold}.v-none{color:#888}
.tag{border-radius:.25rem;padding:0 .35rem;font-size:.85em;white-space:nowrap}
.tag.real{background:#dff3df;color:#0b520b}.tag.standin{background:#ffe3b3;color:#7a3d00;
font-weight:bold}.tag.gen{background:#e6ecf5;color:#2c3e5a}
ul.runs{list-style:none;padding-left:0}ul.runs li{padding:.15rem .4rem;
border-left:.3rem solid #ccc;margin:.15rem 0}ul.runs li.real{border-color:#2e9b2e}
ul.runs li.standin{border-color:#e08a00;background:#fff6e6}ul.runs li.gen{border-color:#7d93b5}
nav{position:sticky;top:0;background:#fff;padding:.4rem 0;border-bottom:1px solid #ddd;
font-size:.9em}nav a{margin-right:.6rem}tr.sanity td:not(.ok):not(.bad){color:#555}
img{max-width:100%}code{background:#f3f3f3}section{margin-top:2rem}
"""


def render_html(markdown_claims: pl.DataFrame, sweep: Sweep, figures, command: str,
                runs: list[Run] | None = None) -> str:
    claims = markdown_claims
    runs = runs if runs is not None else runs_of(sweep)
    summary = system_summary(claims, runs)
    nav = " ".join(f"<a href='#{_anchor(r['system'])}'>{html.escape(r['system'])}</a>"
                   for r in summary)
    sections = []
    for row in summary:
        system = row["system"]
        mine = claims.filter(pl.col("system") == system)
        parts = [f"<section id='{_anchor(system)}'><h2>{html.escape(system)}</h2>",
                 f"<p>{html.escape(row['counts'].sentence)}; data: "
                 f"{html.escape(row['data'])}.</p>", _html_peers(peer_rows(claims, system))]
        if mine.height:
            parts.append(_html_claims(mine))
        for key, results in _results_by_experiment(sweep, system).items():
            parts.append(f"<h3>{html.escape(key)}</h3>")
            if results[0].notes:
                parts.append(f"<p>{html.escape(ran_with_text([results[0].notes]))}</p>")
            parts += [
                f"<figure><img alt='{html.escape(fig.name)}' src='data:image/png;base64,"
                f"{base64.b64encode(fig.png).decode()}'/><figcaption>{html.escape(fig.caption)}"
                "</figcaption></figure>"
                for section, _, fig in figures if section == key]
        sections.append("".join(parts) + "</section>")
    failures = "".join(
        f"<li>{html.escape(f'{f.system}.{f.experiment} seed {f.seed}: {f.error}')}</li>"
        for f in sweep.failures
    )
    counts = count_claims(claims)
    ran = sum(r.status == "ran" for r in runs)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>schedlab reproduce report</title>
<style>{_CSS}</style></head><body>
<h1>schedlab reproduce report</h1>
<p>schedlab {html.escape(__version__)}, scale <code>{html.escape(sweep.scale)}</code>,
seeds {html.escape(str(sweep.seeds))}. Regenerate with <code>{html.escape(command)}</code>.</p>
<p><strong>{html.escape(counts.sentence)}</strong>; {ran} of {len(runs)} experiments ran.
A <em>claim</em> is compared with the paper's figure; a <em>sanity</em> row is a correctness
check or holds by construction. A claim holds when its mean over seeds meets the target and so
do at least two thirds of its seeds. <em>vs it</em>: win / tie / lose against the strongest peer
(tie: the paired difference's 95% CI spans 0).</p>
<nav id='systems-nav'>{nav}</nav>
<h2 id='systems'>Systems</h2>
{_html_summary(summary)}
<h2 id='what-ran'>What ran</h2>
<p><span class='tag real'>real data</span> <span class='tag standin'>seeded stand-in</span>
(the real data was absent) <span class='tag gen'>generated workload</span> (synthetic by
design)</p>
{_html_runs(runs)}
{f'<h2>Failed experiments</h2><ul>{failures}</ul>' if failures else ''}
{''.join(sections)}
</body></html>
"""


def runs_frame(runs: list[Run]) -> pl.DataFrame:
    return pl.DataFrame(
        [dict(system=r.system, experiment=r.experiment, status=r.status, detail=r.detail,
              seeds=r.seeds, data=r.data, what_ran=r.sentence) for r in runs],
        schema={"system": pl.String, "experiment": pl.String, "status": pl.String,
                "detail": pl.String, "seeds": pl.Int64, "data": pl.String,
                "what_ran": pl.String})


def write_report(
    sweep: Sweep, out: str | Path, command: str = "schedlab reproduce",
    runs: list[Run] | None = None,
) -> pl.DataFrame:
    """Write report.md, index.html, results.parquet, claims.csv, runs.csv and figures/ under
    ``out``; ``runs`` (default: from the sweep) says what ran for each experiment.

    Returns the claims frame. Each file is replaced atomically; figures are written first so
    the documents never point at a missing image.
    """
    out = ensure_directory(out)
    claims = claims_frame(sweep)
    figures = _report_figures(sweep)
    for _, name, fig in figures:
        write_bytes(out / "figures" / name, fig.png)
    write_frame(measurements_frame(sweep), out / "results.parquet")
    write_frame(claims.select(*CLAIM_COLUMNS, pl.exclude(CLAIM_COLUMNS)), out / "claims.csv")
    runs = runs if runs is not None else runs_of(sweep)
    write_frame(runs_frame(runs), out / "runs.csv")
    write_text(out / "report.md", render_markdown(sweep, claims, figures, command, runs))
    write_text(out / "index.html", render_html(claims, sweep, figures, command, runs))
    return claims
