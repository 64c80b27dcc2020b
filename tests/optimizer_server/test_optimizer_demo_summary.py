"""The demo's closing summary: baseline against the recommendation, per metric, in percent."""

from __future__ import annotations

from servo_actors.demo import summary_lines
from servo_actors.demo.adoption import adoption
from servo_actors.readable import number_text


def driver_state(confirmed: bool = True) -> dict:
    settings = {"web": {"cpu": 1.0, "memory": 2.0, "replicas": 2, "gc": "g1"}}
    return {
        "plan": {"objective": {"minimize": "cost", "constraints": ["p99_latency <= 250"]}},
        "steps": [
            {"n": 0, "status": "ok", "settings": settings, "metrics": {"cost": 0.1, "p99_latency": 200.0}},
        ],
        "best": {
            "step": 7,
            "settings": {"web": {**settings["web"], "cpu": 0.5, "gc": "parallel"}},
            "metrics": {"cost": 0.08, "p99_latency": 240.0},
            "confirmed": confirmed,
            "note": "3 readings, every constraint held by 2 standard errors"
            if confirmed
            else "2 of 3 readings",
            "constraints": [
                {
                    "constraint": "p99_latency <= 250",
                    "value": 240.0,
                    "uncertainty": 1.5,
                    "readings": 3,
                    "met": True,
                    "met_with_margin": True,
                }
            ],
        },
    }


def test_the_summary_compares_each_metric_and_gives_the_improvement_in_percent():
    lines = summary_lines(driver_state())
    text = "\n".join(lines)
    assert lines[0] == (
        "summary: baseline (step 0) -> recommendation (step 7), confirmed: "
        "3 readings, every constraint held by 2 standard errors"
    )
    assert "settings: web.cpu 1 -> 0.5, web.gc g1 -> parallel" in text
    cost = next(line for line in lines if line.strip().startswith("cost"))
    assert "0.1" in cost and "0.08" in cost and "-20.0 %" in cost and "20.0 % better" in cost
    latency = next(line for line in lines if line.strip().startswith("p99_latency "))
    assert "+20.0 %" in latency and "limit <= 250" in latency
    assert "p99_latency <= 250: 240 ± 1.5 (3 readings) holds with margin" in text
    assert text.count("holds with margin") == 1 and "not confirmed" not in text.lower()


def test_an_unconfirmed_recommendation_says_so_in_every_line_and_a_missing_one_is_told():
    lines = summary_lines(driver_state(confirmed=False))
    assert lines[0] == "summary: baseline (step 0) -> recommendation (step 7), NOT CONFIRMED: 2 of 3 readings"
    # One verdict: no constraint line of an unconfirmed recommendation says it simply holds.
    [constraint] = [line for line in lines if line.strip().startswith("p99_latency <= 250:")]
    assert constraint.endswith("holds with margin so far: not confirmed"), constraint
    assert summary_lines({"steps": [], "best": None}) == [
        "summary: no baseline reading and recommendation to compare"
    ]


def test_a_single_reading_claims_no_margin_and_counts_in_the_singular():
    state = driver_state(confirmed=False)
    state["best"]["note"] = "1 of 3 readings (not measured again yet)"
    state["best"]["constraints"][0].update(readings=1, uncertainty=None)
    [constraint] = [line for line in summary_lines(state) if line.strip().startswith("p99_latency <= 250:")]
    assert (
        constraint
        == "  p99_latency <= 250: 240 (1 reading) holds in a single reading: no margin yet, not confirmed"
    )


def test_numbers_are_shown_without_exponents_for_ordinary_magnitudes():
    assert number_text(15370.4) == "15370"
    assert number_text(1456.0) == "1456"
    assert number_text(0.004184) == "0.004184"
    assert number_text(244.0) == "244"
    assert number_text(3) == "3" and number_text("g1") == "g1"
    assert number_text(float("nan")) == "nan"


def test_only_a_confirmed_recommendation_better_than_the_baseline_is_adopted():
    state = driver_state()
    state["steps"][0].update(objective=0.1, feasible=True)
    state["best"]["objective"] = 0.08
    chosen = adoption(state)
    assert chosen.recommendation and chosen.settings == state["best"]["settings"]
    # Not confirmed: the baseline stays, and the reason quotes the note.
    state["best"]["confirmed"] = False
    state["best"]["note"] = "1 of 3 readings (not measured again yet)"
    kept = adoption(state)
    assert not kept.recommendation and kept.settings == state["steps"][0]["settings"]
    assert "is not confirmed: 1 of 3 readings (not measured again yet)" in kept.reason
    # Confirmed but costlier than a baseline that holds: the baseline stays.
    state["best"].update(confirmed=True, objective=0.12)
    kept = adoption(state)
    assert not kept.recommendation and "no better than the baseline (cost 0.12 against 0.1)" in kept.reason
    # Confirmed and costlier than a baseline that breaks a constraint: the recommendation is adopted.
    state["steps"][0]["feasible"] = False
    assert adoption(state).recommendation
    # The recommendation is the baseline itself.
    state["best"]["step"] = 0
    assert adoption(state).reason == "the recommendation is the baseline"
    assert adoption({"steps": [], "best": None}) is None
