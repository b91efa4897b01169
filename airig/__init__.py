"""airig: a local AI cluster for a home GPU rig."""

__version__ = "0.1.0"
