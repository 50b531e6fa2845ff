"""Carry-over to the real tools: exports of a policy as their settings, and what srt does differently."""
