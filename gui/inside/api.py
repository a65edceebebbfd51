"""What other parts may use of the Inside feature."""

# the jobs that leave the Score view open
JOBS = ("inside", "inside rollout", "decision strip", "attribution")
