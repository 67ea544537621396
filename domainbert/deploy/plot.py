"""The export's trade-off plot: ms/example at batch 32 against the macro-F1 that chooses, one labelled point a variant.

The vertical axis is the score the recommendation reads (:func:`~domainbert.deploy.recommend.scored_on`): validation
when every variant was measured on ``--val``, else the test data. With validation on the axis, each variant's test
score is drawn beside it as a small hollow marker, reported only, so the circled pick is judged on the score that
chose it.
"""

from __future__ import annotations

from pathlib import Path

from domainbert.deploy.recommend import label, scored_on

#: The plot's file in the export folder.
PLOT_FILE = "tradeoff.png"


def plot_points(rows: list[dict], recommended: str | None = None) -> tuple[list[dict], str]:
    """The plot's data: ``(points, split)``, a point per row with a latency and the choosing score, fastest first.

    Each point is ``{"label", "role", "x": ms/example at batch 32, "y": the choosing score, "test": the test score
    (None when ``y`` is it), "recommended": bool}``; ``split`` is ``validation`` or ``test``.
    """
    key, split = scored_on(rows)
    points = []
    for r in sorted(rows, key=lambda r: r.get("latency_ms_b32") or 0.0):
        if r.get("latency_ms_b32") is None or r.get(key) is None:
            continue
        test = r.get("f1_macro") if split == "validation" else None
        points.append(
            {
                "label": label(r),
                "role": r.get("role"),
                "x": r["latency_ms_b32"],
                "y": r[key],
                "test": test,
                "recommended": r["variant"] == recommended,
            }
        )
    return points, split


def axis_labels(split: str) -> tuple[str, str]:
    """``(x label, y label)`` of the plot whose choosing score is on ``split``."""
    y = "validation macro-F1 (chooses)" if split == "validation" else "macro-F1 on --data (chooses)"
    return "ms/example at batch 32 (lower is faster)", y


def tradeoff_figure(rows: list[dict], recommended: str | None = None):
    """The figure: a point per row with a latency and a choosing score, each labelled; the recommended one circled.

    The teacher's rows are orange, the probe grey, the model's blue, other roles (a joined export's) in colours of
    their own; both axes start near the data. With validation on the axis, test scores stand beside as hollow grey
    markers (``test (reported only)``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, split = plot_points(rows, recommended)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = {"teacher": "#d62", "probe": "#888", "student": "#37a", "model": "#37a"}
    others = iter(["#3a7", "#a4c", "#c93", "#4bc", "#777"] * len(points))
    for role in dict.fromkeys(p["role"] for p in points):
        colors.setdefault(role, next(others))
    tested = False
    for i, p in enumerate(points):
        ax.scatter([p["x"]], [p["y"]], color=colors[p["role"]], zorder=3)
        if p["test"] is not None:
            ax.scatter([p["x"]], [p["test"]], s=18, facecolors="none", edgecolors="#999", zorder=2)
            ax.plot([p["x"]] * 2, [p["y"], p["test"]], color="#ccc", linewidth=0.8, zorder=1)
            tested = True
        below = i % 2  # neighbours in latency alternate above and below their point, so their labels part
        offset = (5, -11 if below else 4)
        ax.annotate(p["label"], (p["x"], p["y"]), textcoords="offset points", xytext=offset, fontsize=8)
        if p["recommended"]:
            ax.scatter([p["x"]], [p["y"]], s=220, facecolors="none", edgecolors="#2a2", linewidths=2, zorder=4)
    if points:
        xs = [p["x"] for p in points]
        ys = [p["y"] for p in points] + [p["test"] for p in points if p["test"] is not None]
        pad_y = max(0.01, (max(ys) - min(ys)) * 0.15)
        ax.set_ylim(min(ys) - pad_y, max(ys) + pad_y)
        ax.set_xlim(0, max(xs) * 1.25)
    if tested:
        ax.scatter([], [], s=18, facecolors="none", edgecolors="#999", label="test (reported only)")
        ax.legend(fontsize=7, loc="lower right")
    xlabel, ylabel = axis_labels(split)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    rec = next((p["label"] for p in points if p["recommended"]), None)
    circled = f"; circled: recommended ({rec})" if rec else ""
    ax.set_title(f"Deployment variants: latency against {split} macro-F1{circled}", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def write_plot(rows: list[dict], folder: Path, recommended: str | None = None) -> Path | None:
    """Save :func:`tradeoff_figure` as ``folder/tradeoff.png`` (atomically); None when no row has both values."""
    import os
    import tempfile

    import matplotlib.pyplot as plt

    if not plot_points(rows)[0]:
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
