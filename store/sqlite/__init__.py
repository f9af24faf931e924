"""The sqlite kind: queues and messages in one SQLite database."""
