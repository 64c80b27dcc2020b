"""servo-actors: a servo agent whose connectors are supervised, crash-only actors."""

__version__ = "0.1.0"
USER_AGENT = f"servo-actors/{__version__}"

__all__ = ["__version__", "USER_AGENT"]
