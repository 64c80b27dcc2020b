"""The supervision rules, pure: what the supervisor decides, as state machines driven by events and
a clock passed in (no process control, no Thespian, no I/O: .importlinter ``actors-pure-rules``),
and the plain data they exchange (messages, results, placement)."""
