"""The embedded optimizer: a server speaking the optimizer's side of the protocol, and its drivers.

``server.OptimizerServer`` owns HTTP and the protocol's bookkeeping; a driver (``driver.Driver``)
chooses the commands: ``scripted.ScriptedDriver`` plays a fixed script with faults, and
``search.SearchDriver`` searches the described settings for a plan's objective.
"""
