"""``python -m servo_actors`` and the ``servo-actors`` script.

The stop signals are taken before anything else is imported: loading the command line takes a
few hundred milliseconds, and a SIGTERM or Ctrl-C in them must be recorded (signals.py), not end
the process half-started or print a traceback.
"""

from servo_actors import signals


def main() -> None:
    signals.take_over_process()
    from servo_actors.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
