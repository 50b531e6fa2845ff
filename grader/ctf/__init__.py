"""The capture-the-flag ladder: levels, attacks and their judging."""
