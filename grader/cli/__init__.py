"""The command line: argv in, exit codes out."""
