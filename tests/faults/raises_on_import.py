"""A plugin that raises while it is imported."""
import fusebench  # noqa: F401

raise RuntimeError("this plugin refuses to load")
