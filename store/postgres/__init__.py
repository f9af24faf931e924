"""The "postgres" store kind: queues, links, services and messages in PostgreSQL."""
