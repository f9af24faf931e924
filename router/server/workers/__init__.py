"""Several worker processes behind one address (`serve --workers N`, docs/workers.md):
the supervisor that binds the listener once and keeps the workers running, and
what each worker is given."""
