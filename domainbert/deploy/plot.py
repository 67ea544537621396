"""The export's trade-off plot: ms/example at batch 32 against macro-F1 on ``--data``, one labelled point a variant."""

from __future__ import annotations

from pathlib import Path

from domainbert.deploy.recommend import label

#: The plot's file in the export folder.
PLOT_FILE = "tradeoff.png"


def tradeoff_figure(rows: list[dict], recommended: str | None = None):
    """The figure: a point per row with a latency and a macro-F1, each labelled; the recommended one circled.

    The teacher's rows are orange, the probe grey, the model's blue; both axes start near the data.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [r for r in rows if r.get("latency_ms_b32") is not None and r.get("f1_macro") is not None]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = {"teacher": "#d62", "probe": "#888"}
    rec = None
    for i, r in enumerate(sorted(points, key=lambda r: r["latency_ms_b32"])):
        x, y = r["latency_ms_b32"], r["f1_macro"]
        ax.scatter([x], [y], color=colors.get(r.get("role"), "#37a"), zorder=3)
        below = i % 2  # neighbours in latency alternate above and below their point, so their labels part
        ax.annotate(label(r), (x, y), textcoords="offset points", xytext=(5, -11 if below else 4), fontsize=8)
        if r["variant"] == recommended:
            rec = label(r)
            ax.scatter([x], [y], s=220, facecolors="none", edgecolors="#2a2", linewidths=2, zorder=4)
    if points:
        xs, ys = [r["latency_ms_b32"] for r in points], [r["f1_macro"] for r in points]
        pad_y = max(0.01, (max(ys) - min(ys)) * 0.15)
        ax.set_ylim(min(ys) - pad_y, max(ys) + pad_y)
        ax.set_xlim(0, max(xs) * 1.25)
    ax.set_xlabel("ms/example at batch 32 (lower is faster)")
    ax.set_ylabel("macro-F1 on --data")
    circled = f"; circled: recommended ({rec})" if rec else ""
    ax.set_title(f"Deployment variants: latency against macro-F1{circled}", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def write_plot(rows: list[dict], folder: Path, recommended: str | None = None) -> Path | None:
    """Save :func:`tradeoff_figure` as ``folder/tradeoff.png`` (atomically); None when no row has both values."""
    import os
    import tempfile

    import matplotlib.pyplot as plt

    if not any(r.get("latency_ms_b32") is not None and r.get("f1_macro") is not None for r in rows):
        return None
    fig = tradeoff_figure(rows, recommended)
    fd, tmp = tempfile.mkstemp(prefix=".tradeoff-", suffix=".png", dir=folder)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=90, bbox_inches="tight")
        os.replace(tmp, folder / PLOT_FILE)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return folder / PLOT_FILE
