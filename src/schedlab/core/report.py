"""The reproduce report: Markdown, a self-contained HTML page, Parquet and CSV.

The first section of both documents says what ran, per experiment (``ran with <tool>``, ``ran
with the embedded <x>``, ``not run: <why>``), so a missing tool can never hide an experiment;
then the claims table (system | paper's claim | our figure | seeds holding | holds), because
that is what a reader comes for. Every file is written atomically, so an
interrupted run leaves either the previous report or the new one, never half of either.
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
    measurements_frame,
    runs_of,
)
from schedlab.core.io import ensure_directory, write_bytes, write_frame, write_text


def format_figure(value: float, ci: float | None = None) -> str:
    if value != value:
        return "n/a"
    text = f"{value:.4g}"
    if ci and ci == ci and ci > 0:
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


def _claims_markdown(claims: pl.DataFrame) -> list[str]:
    lines = ["| system | paper's claim | paper | target | our figure | seeds holding | holds |",
             "|---|---|---|---|---|---|---|"]
    for row in claims.iter_rows(named=True):
        mark = "yes" if row["holds"] else "**no**"
        target = f"{row['comparison']} {format_figure(row['target'])}"
        ours = format_figure(row["measured"], row["measured_ci95"])
        claim = row["claim"].replace("|", "\\|")
        lines.append(f"| {row['system']} | {claim} | {row['paper_figure']} | {target} | "
                     f"{ours} | {row['seeds_holding']}/{row['seeds']} | {mark} |")
    return lines


def _runs_markdown(runs: list[Run]) -> list[str]:
    lines = ["| experiment | seeds | what ran |", "|---|---|---|"]
    for run in runs:
        text = run.sentence.replace("|", "\\|")
        lines.append(f"| {run.system}.{run.experiment} | {run.seeds} | "
                     f"{text if run.status == 'ran' else f'**{text}**'} |")
    return lines


def render_markdown(sweep: Sweep, claims: pl.DataFrame, figures, command: str,
                    runs: list[Run] | None = None) -> str:
    holding = int(claims["holds"].sum()) if claims.height else 0
    runs = runs if runs is not None else runs_of(sweep)
    lines = [
        "# schedlab reproduce report", "",
        f"schedlab {__version__}, scale `{sweep.scale}`, seeds {sweep.seeds}, "
        f"generated {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        f"Regenerate with `{command}`.", "",
        "## What ran", "",
        *_runs_markdown(runs), "",
        "## Claims", "",
        *_claims_markdown(claims), "",
        f"{holding} of {claims.height} claims hold. Figures are means over seeds (± 95% CI); a "
        "claim holds when its mean meets the target and so do at least two thirds of its seeds.",
        "",
    ]
    if sweep.failures:
        lines += ["## Failed experiments", ""]
        lines += [f"- {f.system}.{f.experiment} seed {f.seed}: {f.error}" for f in sweep.failures]
        lines.append("")
    for key in dict.fromkeys(f"{r.system}.{r.experiment}" for r in sweep.results):
        runs = [r for r in sweep.results if f"{r.system}.{r.experiment}" == key]
        seconds = sum(r.seconds for r in runs) / len(runs)
        lines += [f"## {key}", "", f"{len(runs)} seed(s), {seconds:.1f} s per seed.", ""]
        if runs[0].notes:
            lines += [runs[0].notes, ""]
        for section, name, fig in figures:
            if section == key:
                lines += [f"![{fig.caption or fig.name}](figures/{name})", "",
                          f"*{fig.caption}*" if fig.caption else "", ""]
    return "\n".join(lines).rstrip() + "\n"


def render_html(markdown_claims: pl.DataFrame, sweep: Sweep, figures, command: str,
                runs: list[Run] | None = None) -> str:
    runs = runs if runs is not None else runs_of(sweep)
    ran = "".join(
        f"<tr><td>{html.escape(f'{r.system}.{r.experiment}')}</td><td>{r.seeds}</td>"
        f"<td class='{'ok' if r.status == 'ran' else 'bad'}'>{html.escape(r.sentence)}</td></tr>"
        for r in runs)
    rows = []
    for row in markdown_claims.iter_rows(named=True):
        cls = "ok" if row["holds"] else "bad"
        rows.append(
            "<tr>" + "".join(
                f"<td>{html.escape(str(v))}</td>" for v in (
                    row["system"], row["claim"], row["paper_figure"],
                    f"{row['comparison']} {format_figure(row['target'])}",
                    format_figure(row["measured"], row["measured_ci95"]),
                    f"{row['seeds_holding']}/{row['seeds']}")
            ) + f"<td class='{cls}'>{'yes' if row['holds'] else 'no'}</td></tr>"
        )
    sections = []
    for key in dict.fromkeys(f"{r.system}.{r.experiment}" for r in sweep.results):
        imgs = "".join(
            f"<figure><img alt='{html.escape(fig.name)}' src='data:image/png;base64,"
            f"{base64.b64encode(fig.png).decode()}'/><figcaption>{html.escape(fig.caption)}"
            "</figcaption></figure>"
            for section, _, fig in figures if section == key
        )
        sections.append(f"<h2>{html.escape(key)}</h2>{imgs}")
    failures = "".join(
        f"<li>{html.escape(f'{f.system}.{f.experiment} seed {f.seed}: {f.error}')}</li>"
        for f in sweep.failures
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>schedlab reproduce report</title>
<style>
body{{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem}}
table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #ccc;padding:.3rem .5rem;
vertical-align:top}}th{{background:#f3f3f3}}.ok{{color:#116611;font-weight:bold}}
.bad{{color:#aa1111;font-weight:bold}}img{{max-width:100%}}code{{background:#f3f3f3}}
</style></head><body>
<h1>schedlab reproduce report</h1>
<p>schedlab {html.escape(__version__)}, scale <code>{html.escape(sweep.scale)}</code>,
seeds {html.escape(str(sweep.seeds))}. Regenerate with <code>{html.escape(command)}</code>.</p>
<h2>What ran</h2>
<table><thead><tr><th>experiment</th><th>seeds</th><th>what ran</th></tr></thead>
<tbody>{ran}</tbody></table>
<h2>Claims</h2>
<p>A claim holds when its mean over seeds meets the target and so do at least two thirds of
its seeds.</p>
<table><thead><tr><th>system</th><th>paper's claim</th><th>paper</th><th>target</th>
<th>our figure</th><th>seeds holding</th><th>holds</th></tr></thead>
<tbody>{''.join(rows)}</tbody></table>
{f'<h2>Failed experiments</h2><ul>{failures}</ul>' if failures else ''}
{''.join(sections)}
</body></html>
"""


def runs_frame(runs: list[Run]) -> pl.DataFrame:
    return pl.DataFrame(
        [dict(system=r.system, experiment=r.experiment, status=r.status, detail=r.detail,
              seeds=r.seeds, what_ran=r.sentence) for r in runs],
        schema={"system": pl.String, "experiment": pl.String, "status": pl.String,
                "detail": pl.String, "seeds": pl.Int64, "what_ran": pl.String})


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
