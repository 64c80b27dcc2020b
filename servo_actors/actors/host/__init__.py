"""The connector host: the actor that runs one connector in its own process (``ConnectorHost``,
actor.py), its worker thread's job at a time (``HostWorker``, worker.py), and the calls to the
plain connector with the checks of what it returns (connector_calls.py).
"""
