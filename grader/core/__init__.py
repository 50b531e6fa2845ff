"""The pipeline: a policy, the world it is judged against, what it grants, the probes, the plan and the verdicts."""
