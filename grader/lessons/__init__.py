"""The lessons' features, each with its views beside it: quiz (quiz_views, quiz_widgets), progress (progress_views),
goals (goal_views), prediction, the scripted agent (agent_views, agent_stage), gaps; the probe board (board) and the
main widgets (widgets, which re-exports every widget a lesson imports), sharing only the palette."""
