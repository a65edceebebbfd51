"""What drives sessions for a caller: the window's actions (``workbench``), the comparison of
methods (``compare``), the seed-compatible functions (``compat``) and the benchmark
(``bench``)."""
