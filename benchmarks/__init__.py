"""Throughput, memory and parameter benchmarks: two model configurations on the same data,
measured in one run with interleaved repetitions, reported as ratios B/A.

* ``benchmarks.harness``: the measurements (``Settings``, ``Benchmark``, ``run_comparison``);
* ``benchmarks.memory``: peak-RSS probes, each in a fresh subprocess;
* ``benchmarks.report``: statistics, ratios, JSON and the markdown table;
* ``python -m benchmarks.run``: the command line for any two configurations;
* ``python -m benchmarks.run_baseline`` (``make benchmark``): the reference comparisons.

See docs/benchmarks.md.
"""
