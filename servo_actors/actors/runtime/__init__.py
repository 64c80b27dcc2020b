"""The servo's side of the actors: ``ServoRuntime`` (servo_runtime.py), the one object the runner
and the CLI use, with its link to its actor system (``SystemLink``, system_link.py), the records
it hands its callers (``Operation``, ``CancelRequest``: operation.py), the one path every operation
takes (``OperationPath``, operation_path.py), the declared durations an operation's deadline is
built from (declared_times.py), and the actor system several applications share (``ServoTree``,
servo_tree.py).
"""
