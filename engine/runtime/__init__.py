"""How the process runs its threads (issue 57): ``env`` (what must be set before torch loads:
how OpenMP's threads wait) and ``threads`` (the adaptive thread count: a decode step that takes
far longer than its usual time with N threads drops to fewer, and the count comes back when the
machine is quiet). Neither imports Qt; ``env`` imports nothing heavy, so the launcher can call
it first."""
