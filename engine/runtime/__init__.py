"""How the process runs its threads (issue 57): ``threads``, the adaptive thread count (a
decode step that takes far longer than its usual time with N threads drops to fewer, and the
count comes back when the machine is quiet). Nothing here imports Qt; nothing needs setting
before torch loads (``threads``' head says why OpenMP's passive wait was measured and left)."""
