"""The lessons' features, each with its views: quiz, progress, goals, prediction, the scripted agent, gaps; the board and widgets."""
