"""Throughput, memory and parameter benchmarks: two model configurations on the same data,
measured in one run with interleaved repetitions, reported as ratios B/A.

* ``benchmarks.harness``: the measurements (``Settings``, ``Benchmark``, ``run_comparison``);
* ``benchmarks.fairseq_steps``: the fairseq calls measured (build, train one step, decode one batch);
* ``benchmarks.memory``: peak-RSS probes, each in a fresh subprocess;
* ``benchmarks.report``: statistics, ratios, the results file (one run, or a comparison's runs
  each under its tag) and the markdown table;
* ``python -m benchmarks.run``: the command line for any two configurations;
* ``python -m benchmarks.run_baseline`` (``make benchmark``): the reference comparisons;
* ``python -m benchmarks.run_methods``: each method against a dense model of its active size;
* ``python -m benchmarks.summary_tables``: the summary tables of docs/benchmarks.md from the results.

See docs/benchmarks.md.
"""
