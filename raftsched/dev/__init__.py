"""Running real processes locally: the process supervisor and the dev cluster."""
