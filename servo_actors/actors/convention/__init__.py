"""Hosts of a convention: connectors placed on other machines (the settings of a convention, a
member system's host, the supervisor's view of remote hosts, and the ``agent`` that runs there).

``from servo_actors.actors.convention import convention_settings`` is the old path of
``convention.settings``'s names, kept for one release (README, migration notes).
"""

from servo_actors.actors.convention.settings import *  # noqa: F403 (the old module's names)
from servo_actors.actors.convention.settings import __all__ as __all__
