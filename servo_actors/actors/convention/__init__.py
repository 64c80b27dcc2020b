"""Hosts of a convention: connectors placed on other machines (the settings of a convention, a
member system's host, the supervisor's view of remote hosts, and the ``agent`` that runs there).
"""
