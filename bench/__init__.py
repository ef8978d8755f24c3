"""Side-by-side benchmarks of bertpre and its peers, run as `python -m bench.NAME` from the repository root."""
