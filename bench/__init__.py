"""safesend benchmarks: `bash scripts/bench.sh` (or `python -m bench.run --help`).

Each comparison measures two variants side by side in the same run, interleaved
where that is possible, and reports their ratio. See bench/README.md.
"""
