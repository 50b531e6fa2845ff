"""The course's state and rules, apart from how a notebook shows them: the route and the learner's progress, the
question bank and first answers, goals and predictions, the capture-the-flag ladder (levels, diagnosis, reveals),
and the runs a lesson asks for (the scripted agent, gaps, hole hunts, runs prepared ahead).

A grader that imports a course rule never pulls in a widget: nothing here imports ipywidgets or IPython
(an import-linter contract in ``pyproject.toml``).
"""
