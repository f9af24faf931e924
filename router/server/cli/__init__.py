"""The command line: `smp-router` and its subcommands."""
