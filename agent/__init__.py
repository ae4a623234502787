"""The raftsched agent: one per compute cluster; admits, fences, runs and reports tasks."""
