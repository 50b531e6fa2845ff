"""Grading a class: tasks and their rubrics, grades, batches, the nbgrader step, reports."""
