"""A plugin module that fails to import."""

raise RuntimeError("this plugin is broken on purpose")
