"""``servo-actors import-servox``: a servox configuration converted to servo-actors' servo.yaml.

::

    from servo_actors.servox_import.document import convert_file
    from servo_actors.servox_import.yaml_writer import write_yaml

    converted = convert_file(Path("servox.yaml"))    # ConfigError (exit 2) naming the servox key
    text = write_yaml(converted)                      # servo.yaml, a comment on each changed line
    converted.not_converted                           # what has no equivalent here, one line each

Each of servox's connectors is mapped by a module of its own (``kubernetes``, ``prometheus``,
``vegeta``, ``simple`` for ``wait`` and ``kube_metrics``, ``opsani_dev`` built on the first two);
``quantities`` reads servox's CPU, memory, duration and rate values; ``conversion`` is what they
build. The table of every servox feature and where it lives here is docs/coming-from-servox.md.
"""
