"""docs/protocol.md's JSON examples are what the wire models read and write, exactly.

Every ``json`` block of the page is a request body, a command, a result or a progress param; each
is read by the protocol's own parsers and dumped back to the same JSON, so the page cannot drift
from the models (tests/protocol holds the same examples as the models' own tests).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from servo_actors.protocol.reading import parse_envelope, parse_param, parse_reply, to_wire

PAGE = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def json_blocks() -> list[dict]:
    return [json.loads(text) for text in re.findall(r"^```json\n(.*?)^```", PAGE.read_text(), re.M | re.S)]


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def test_every_json_example_of_the_protocol_page_round_trips_through_the_wire_models() -> None:
    blocks = json_blocks()
    kinds = []
    for example in blocks:
        if "cmd" in example:
            model = parse_reply(example)
            kinds.append(example["cmd"])
        elif "event" in example:
            model = parse_envelope(example)
            kinds.append("envelope")
        else:
            event = "DESCRIPTION" if "descriptor" in example else "MEASUREMENT"
            model = parse_param(event, example)
            assert model is not None
            kinds.append(type(model).__name__)
        assert canonical(to_wire(model)) == canonical(example), example
    assert {"envelope", "DESCRIBE", "MEASURE", "ADJUST", "SLEEP"} <= set(kinds)
    assert {"DescriptionResult", "MeasurementResult", "Progress"} <= set(kinds)
