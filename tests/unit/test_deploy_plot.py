"""The trade-off plot puts the score that chooses on its axis: validation, with test beside it as reported only."""

from __future__ import annotations

from domainbert.deploy.plot import axis_labels, plot_points, tradeoff_figure


def _rows(val: bool = True):
    rows = [
        {"variant": "teacher", "role": "teacher", "latency_ms_b32": 18.9, "f1_macro": 0.79, "val_f1_macro": 0.80},
        {"variant": "int8", "role": "student", "latency_ms_b32": 4.2, "f1_macro": 0.75, "val_f1_macro": 0.78},
        {"variant": "larger_teacher", "role": "larger teacher", "latency_ms_b32": 60.0, "f1_macro": 0.82},
    ]
    rows[2]["val_f1_macro"] = 0.81
    if not val:
        for r in rows:
            del r["val_f1_macro"]
    return rows


def test_validation_is_the_choosing_axis_and_test_is_drawn_beside_it():
    points, split = plot_points(_rows(), recommended="int8")
    assert split == "validation"
    assert [(p["label"], p["x"], p["y"], p["test"]) for p in points] == [
        ("student int8", 4.2, 0.78, 0.75),
        ("teacher", 18.9, 0.80, 0.79),
        ("larger teacher", 60.0, 0.81, 0.82),
    ]
    assert [p["recommended"] for p in points] == [True, False, False]
    assert axis_labels(split)[1] == "validation macro-F1 (chooses)"


def test_the_figure_plots_validation_on_its_axis_and_circles_the_pick_there():
    import matplotlib.pyplot as plt

    fig = tradeoff_figure(_rows(), recommended="int8")
    try:
        ax = fig.axes[0]
        assert ax.get_ylabel() == "validation macro-F1 (chooses)"
        assert "latency against validation macro-F1; circled: recommended (student int8)" in ax.get_title()
        offsets = [tuple(c.get_offsets()[0]) for c in ax.collections if len(c.get_offsets())]
        assert (4.2, 0.78) in offsets and (4.2, 0.75) in offsets  # the pick's validation point, its test beside
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["test (reported only)"]
        low, high = ax.get_ylim()
        assert low < 0.75 and high > 0.82
    finally:
        plt.close(fig)


def test_without_validation_the_test_score_chooses_and_nothing_stands_beside_it():
    points, split = plot_points(_rows(val=False))
    assert split == "test" and [p["y"] for p in points] == [0.75, 0.79, 0.82]
    assert all(p["test"] is None for p in points)
    assert axis_labels(split)[1] == "macro-F1 on --data (chooses)"


def test_a_row_without_a_latency_is_no_point_and_one_without_validation_sends_the_axis_to_test():
    rows = _rows()
    del rows[0]["latency_ms_b32"]
    assert [p["label"] for p in plot_points(rows)[0]] == ["student int8", "larger teacher"]
    rows = _rows()
    del rows[0]["val_f1_macro"]  # the rule then reads test for every row (recommend.scored_on), and so does the plot
    assert plot_points(rows)[1] == "test"
