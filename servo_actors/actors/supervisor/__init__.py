"""The Supervisor actor (actor.py), which performs the pure supervision rules on real processes,
with the bookkeeping of its children's processes it holds (``SupervisedProcesses``,
supervised_processes.py), and the child specs and supervisor settings the runtime builds from the
config for it (child_specs.py).
"""
