"""Generated gRPC code (scripts/gen-proto); do not edit."""
