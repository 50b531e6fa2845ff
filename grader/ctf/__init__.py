"""The capture-the-flag ladder: levels, attacks and their judging (ladder), their views as HTML and text (views),
and the attack editor widget (widgets)."""
