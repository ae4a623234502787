"""The web console: `raftsched web` (see README: Web console)."""
