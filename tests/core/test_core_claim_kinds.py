"""Claims apart from sanity checks: classification, counting, head-to-head verdicts, and the
report's opening (per-system summary, What ran with stand-ins marked, per-system sections)."""

import ast
import re
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from schedlab.core.errors import SchedlabError
from schedlab.core.experiment import (
    Claim,
    Result,
    Run,
    Sweep,
    claims_frame,
    count_claims,
    ran_with_text,
    runs_of,
    verdict,
)
from schedlab.core.report import peer_rows, system_summary, write_report

SRC = Path(__file__).resolve().parents[2] / "src" / "schedlab"


def test_required_rows_must_be_sanity_and_sanity_rows_name_no_peer():
    with pytest.raises(SchedlabError, match="kind='sanity'"):
        Claim("s", "m", 1, 1, required=True)
    with pytest.raises(SchedlabError, match="baseline"):
        Claim("s", "m", 1, 1, kind="sanity", baseline="VTC")
    with pytest.raises(SchedlabError, match="unknown claim kind"):
        Claim("s", "m", 1, 1, kind="evidence")  # type: ignore[arg-type]
    assert Claim("s", "m", 1, 1, required=True, kind="sanity").kind == "sanity"
    assert Claim("s", "m", 1, 1).kind == "claim"


@pytest.mark.parametrize("ours,peer,lower,expected", [
    ([2.0, 2.1, 1.9], [1.0, 1.1, 0.9], False, "win"),
    ([2.0, 2.1, 1.9], [1.0, 1.1, 0.9], True, "lose"),
    ([1.0, 1.2, 0.8], [1.1, 0.9, 1.0], False, "tie"),   # differences +-: the CI spans 0
    ([1.0], [1.0], True, "tie"),
    ([1.0], [2.0], True, "win"),
    ([float("nan")], [1.0], True, ""),
])
def test_verdict_is_win_tie_or_lose_on_the_paired_ci(ours, peer, lower, expected):
    assert verdict(ours, peer, lower) == expected


def _result(system, experiment, seed, claims, data="", ran_with="") -> Result:
    return Result(pl.DataFrame({"v": [seed]}), claims=claims, system=system,
                  experiment=experiment, scale="quick", seed=seed, data=data, ran_with=ran_with)


def _sweep() -> Sweep:
    """Two systems: alpha (two peers, one sanity row failing), beta (a stand-in, no peer)."""
    results = []
    for seed in range(3):
        results.append(_result("alpha", "race", seed, [
            Claim("alpha beats A", "x", 10 + seed, 5.0, baseline="A",
                  our_figure=10.0 + seed, peer_figure=5.0 + seed),
            Claim("alpha no slower than B", "time ratio", 0.9, 1.0, "<=", baseline="B",
                  figure_metric="wall time (s)",
                  our_figure=9.0 + 0.1 * seed, peer_figure=9.0 + 0.1 * (seed % 2 * 2 - 1),
                  lower_is_better=True),
            Claim("alpha's own bound", "b", 0.0, 1.0, kind="sanity"),
            Claim("books balance", "ok", 1.0, 1.0, "==", required=True, kind="sanity"),
        ], data="real", ran_with=f"real trace (seed {seed}) | real trace (seed {seed})"))
        results.append(_result("beta", "guess", seed, [
            Claim("beta is accurate", "mape", 0.2, 0.1, "<="),
        ], data="stand-in", ran_with=f"seeded stand-in (no ../shared/data), seed {seed}"))
    return Sweep(results=results, failures=[], scale="quick", seeds=[0, 1, 2])


def test_claims_and_sanity_checks_are_counted_apart():
    claims = claims_frame(_sweep())
    counts = count_claims(claims)
    assert (counts.claims_holding, counts.claims, counts.sanity_passing, counts.sanity) == (
        2, 3, 1, 2)
    assert counts.sentence == "2 of 3 claims hold (1 of 2 sanity checks pass)"
    alpha = claims.filter(pl.col("system") == "alpha")
    assert alpha["kind"].to_list() == ["claim", "claim", "sanity", "sanity"]
    assert alpha["baseline"].to_list() == ["A", "B", "", ""]


def test_strongest_peer_is_the_one_we_fare_worst_against():
    claims = claims_frame(_sweep())
    peers = peer_rows(claims, "alpha")
    assert [(p["baseline"], p["verdict"]) for p in peers] == [("B", "tie"), ("A", "win")]
    assert peers[1]["our_figure"] == pytest.approx(11.0)
    assert peers[1]["peer_figure"] == pytest.approx(6.0)
    assert peer_rows(claims, "beta") == []


def test_what_ran_says_each_part_once_and_marks_the_stand_in():
    runs = runs_of(_sweep())
    assert [(r.system, r.data, r.data_label) for r in runs] == [
        ("alpha", "real", "real data"), ("beta", "stand-in", "seeded stand-in")]
    assert runs[0].detail == "real trace"
    assert runs[1].detail == "seeded stand-in (no ../shared/data)"
    assert ran_with_text(["a (seed 1) | b", "a (seed 2) | c"]) == "a | b | c"
    assert ran_with_text(["real map; zoo x", "real map; zoo y | real map; zoo x"]) == (
        "real map; zoo x | zoo y")


def test_system_summary_rows():
    sweep = _sweep()
    rows = system_summary(claims_frame(sweep), runs_of(sweep))
    by = {r["system"]: r for r in rows}
    assert by["alpha"]["peer"] == "B" and by["alpha"]["verdict"] == "tie"
    assert by["alpha"]["data"] == "real data" and not by["alpha"]["stand_in"]
    assert by["beta"]["data"] == "seeded stand-in (1 of 1 experiments)" and by["beta"]["stand_in"]
    assert by["beta"]["counts"].sentence == "0 of 1 claims hold (0 of 0 sanity checks pass)"


class _Outline(HTMLParser):
    """Headings, ids, links and class names of a page, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self._tag = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._tag = tag
        if "id" in attrs:
            self.events.append(("id", attrs["id"]))
        if tag == "a" and "href" in attrs:
            self.events.append(("href", attrs["href"]))
        if tag == "table":
            self.events.append(("table", attrs.get("class", "")))
        if tag == "li" and "run" in attrs.get("class", ""):
            self.events.append(("run", attrs["class"]))

    def handle_data(self, data):
        if self._tag in ("h2", "th") and data.strip():
            self.events.append((self._tag, data.strip()))


def test_html_opens_on_the_summary_and_links_every_system_section(tmp_path: Path):
    sweep = _sweep()
    write_report(sweep, tmp_path, command="schedlab reproduce alpha beta --quick")
    page = (tmp_path / "index.html").read_text()
    outline = _Outline()
    outline.feed(page)
    events = outline.events
    h2 = [v for k, v in events if k == "h2"]
    assert h2[:2] == ["Systems", "What ran"] and h2[2:] == ["alpha", "beta"]
    tables = [v for k, v in events if k == "table"]
    assert tables == ["summary", "peers", "claims", "claims"]  # beta has no peer table
    for system in ("alpha", "beta"):
        assert ("href", f"#system-{system}") in events
        assert ("id", f"system-{system}") in events
    runs = [v for k, v in events if k == "run"]
    assert runs == ["run real", "run standin"]
    assert page.count("seeded stand-in (no ../shared/data)") == 1  # once, not once per seed
    # the alpha section opens with the head-to-head table, strongest peer first
    section = page[page.index("id='system-alpha'"):page.index("id='system-beta'")]
    assert section.index("class='peers'") < section.index("class='claims'")
    assert re.search(r"<td>B</td><td>wall time \(s\)</td>.*?class='v-tie'>tie<", section)
    assert "2 of 3 claims hold (1 of 2 sanity checks pass)" in page
    markdown = (tmp_path / "report.md").read_text()
    assert "| [beta](#system-beta) | 0/1 | 0/0 | — | — | **seeded stand-in" in markdown
    assert "[**SEEDED STAND-IN**]" in markdown
    csv = pl.read_csv(tmp_path / "claims.csv")
    assert {"kind", "baseline", "verdict"} <= set(csv.columns)
    assert pl.read_csv(tmp_path / "runs.csv")["data"].to_list() == ["real", "stand-in"]


def test_run_data_label_words():
    assert Run("s", "e", "ran", "", 1, "generated").data_label == "generated workload"
    assert Run("s", "e", "ran", "", 1).data_label == ""


def _calls(tree: ast.AST, name: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
            yield node


def _keyword(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


@pytest.mark.parametrize("path", sorted(
    p for p in SRC.glob("*/*.py") if "@register(" in p.read_text()), ids=lambda p: p.parent.name
    + "/" + p.name)
def test_every_experiment_says_its_data_and_classifies_required_rows(path: Path):
    """Read from the source (no import, no run): every Result an experiment module builds
    says where its data came from, and every required row says it is a sanity check."""
    tree = ast.parse(path.read_text())
    results = list(_calls(tree, "Result"))
    assert results, path
    for call in results:
        assert _keyword(call, "data") is not None, f"{path.name}:{call.lineno} Result without data="
    for call in _calls(tree, "Claim"):
        required = _keyword(call, "required")
        if isinstance(required, ast.Constant) and required.value is True:
            kind = _keyword(call, "kind")
            assert isinstance(kind, ast.Constant) and kind.value == "sanity", (
                f"{path.name}:{call.lineno}")
