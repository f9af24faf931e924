"""SMP codec: pure, sans-I/O. Public names are re-exported here."""
