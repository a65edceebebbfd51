"""How the process runs its threads (issue 57): ``threads``, the adaptive thread count (a
decode step that takes far longer than its usual time with N threads drops to fewer, and the
count comes back when the machine is quiet); ``load``, the machine's load it reads; ``launch``,
what main.py (and the packaged build's runtime hook) runs before torch loads: the load at the
process's start, the adaptive count's first reading (``launch``' head says why OpenMP's wait
settings were measured and left). Nothing here imports Qt."""
