"""Visualising a DFL: a Sankey diagram of bytes between task and file groups, and a timeline.

DataFlowDrs (paper 09, part (a)) shows the data-flow lifecycle as a Sankey diagram: task groups
and file groups as nodes, link width = bytes moved, hover text = time spent in the I/O calls.
It is drawn with Plotly (HTML, self-contained) and exported to PNG with Kaleido when that
works here; the task timeline (one bar per task: queue wait, I/O, compute) uses Matplotlib.
"""

from __future__ import annotations

from pathlib import Path

from schedlab.core.errors import MissingDependencyError
from schedlab.core.io import write_bytes, write_text
from schedlab.dataflowdrs.compress import Compressed
from schedlab.dataflowdrs.dfl import DFL


def sankey_links(compressed: Compressed) -> tuple[list[str], list[dict]]:
    """Node labels and (source, target, bytes, seconds) links of the group-level DFL."""
    graph = compressed.graph
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    labels = [f"{'file' if n[0] == 'file' else 'task'}: {n[1]} (x{graph.nodes[n]['instances']})"
              for n in nodes]
    links = [dict(source=index[u], target=index[v], bytes=int(d["bytes"]), time=float(d["time"]))
             for u, v, d in graph.edges(data=True) if d["bytes"] > 0]
    return labels, links


def sankey_figure(compressed: Compressed, title: str = "data-flow lifecycle"):
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise MissingDependencyError("the Sankey diagram needs plotly",
                                     hint="pip install plotly kaleido==0.2.1") from exc
    labels, links = sankey_links(compressed)
    colours = ["#4c78a8" if lab.startswith("task") else "#f58518" for lab in labels]
    fig = go.Figure(go.Sankey(
        node=dict(label=labels, color=colours, pad=12, thickness=14),
        link=dict(source=[l_["source"] for l_ in links], target=[l_["target"] for l_ in links],
                  value=[l_["bytes"] for l_ in links],
                  customdata=[f"{l_['time']:.4f} s in I/O calls" for l_ in links],
                  hovertemplate="%{value} bytes, %{customdata}<extra></extra>")))
    fig.update_layout(title_text=title, font_size=11, width=1000, height=520)
    return fig


def write_sankey(compressed: Compressed, out_dir: Path, title: str = "",
                 png: bool = True) -> dict[str, str]:
    """Write dfl_sankey.html (always) and dfl_sankey.png (when Kaleido can render)."""
    fig = sankey_figure(compressed, title or "data-flow lifecycle")
    html = out_dir / "dfl_sankey.html"
    write_text(html, fig.to_html(include_plotlyjs=True, full_html=True))
    written = {"html": str(html)}
    if not png:
        return written
    try:
        png = fig.to_image(format="png", scale=1)
    except Exception as exc:  # kaleido missing or unable to start: the HTML still stands
        written["png_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    else:
        write_bytes(out_dir / "dfl_sankey.png", png)
        written["png"] = str(out_dir / "dfl_sankey.png")
    return written


MAX_LABELLED = 60  # tasks named on the y axis; beyond this the rows stay unlabelled
MAX_ROWS_INCHES = 14.0


def timeline_figure(dfl: DFL, title: str = "task timeline"):
    """One horizontal bar per task: waiting (grey), I/O (orange) and compute (blue).

    Drawn as three polygon collections (one per colour), not one artist per bar, so a
    2,000-rank Darshan log costs what a 10-task workflow does; past ``MAX_LABELLED`` tasks
    the rows are not named and the figure's height is capped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    tasks = dfl.tasks.sort("start")
    n = tasks.height
    t0 = float(tasks["start"].min() - tasks["wait"].max()) if n else 0.0
    t0 = min(t0, float(tasks["start"].min())) if n else 0.0
    height = min(0.25 * n + 1.2, MAX_ROWS_INCHES)
    fig, ax = plt.subplots(figsize=(8, height))
    if n:
        start = tasks["start"].to_numpy().astype(float) - t0
        wait, io = (tasks[c].to_numpy().astype(float) for c in ("wait", "io"))
        compute = tasks["compute"].to_numpy().astype(float)
        y = np.arange(n, dtype=float)
        for left, width, colour in ((start - wait, wait, "#dddddd"), (start, io, "#f58518"),
                                    (start + io, compute, "#4c78a8")):
            verts = np.stack([np.stack([left, y - 0.4], 1), np.stack([left + width, y - 0.4], 1),
                              np.stack([left + width, y + 0.4], 1),
                              np.stack([left, y + 0.4], 1)], 1)
            ax.add_collection(PolyCollection(verts, facecolors=colour, edgecolors="none"))
        crit = tasks["critical"].to_numpy()
        end = start + tasks["duration"].to_numpy().astype(float)
        if crit.any():
            ax.plot(end[crit], y[crit], linestyle="none", marker="|", color="red")
        ax.set_xlim(float(min((start - wait).min(), 0.0)), float(max(end.max(), 1e-9)) * 1.02)
        ax.set_ylim(n - 0.5, -0.5)
    if 0 < n <= MAX_LABELLED:
        ax.set_yticks(range(n), tasks["task"].to_list(), fontsize=7)
    else:
        ax.set_yticks([])
        ax.set_ylabel(f"{n} tasks (by start time)")
    ax.set_xlabel("seconds since first task")
    ax.set_title(f"{title} (grey wait, orange I/O, blue compute; red: critical path)",
                 fontsize=9)
    fig.tight_layout()
    return fig


def write_timeline(dfl: DFL, out_dir: Path) -> str:
    import io

    import matplotlib.pyplot as plt

    fig = timeline_figure(dfl)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    path = out_dir / "timeline.png"
    write_bytes(path, buffer.getvalue())
    return str(path)
