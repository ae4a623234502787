"""`python -m raftsched ...` runs the command line."""

from raftsched.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
