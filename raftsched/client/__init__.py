"""The Python client of the scheduler: leader following, the one retry policy, the error map."""
