"""What the command line and the run service share below both: streams, exit codes, one-line errors and their
JSON form, and opening the backend a command asked for."""
