"""The demo's closing summary: baseline against the recommendation, per metric, in percent."""

from __future__ import annotations

from servo_actors.demo import summary_lines


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
