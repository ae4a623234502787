"""The `raftsched` command line and its rendering."""
