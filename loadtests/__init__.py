"""Load tests and benchmarks: ``python -m loadtests.run`` (locust latency runs) and
``python -m loadtests.bench`` (engine and server speed ratios). See docs/benchmarks.md."""
