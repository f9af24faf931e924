"""The router's settings: the configuration record, its file and its data directory."""
