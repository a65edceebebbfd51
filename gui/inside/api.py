"""What other parts may use of the Inside feature."""

JOBS = ("inside", "decision strip", "attribution")  # the jobs that leave the Score view open
