"""The operation ports: control, metrics, the stats log, the information page,
the collector policy."""
