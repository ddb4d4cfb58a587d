"""The cyclic garbage collector's thresholds in the test processes.

Tracing and lowering a JAX program allocate many short-lived Python objects, so CPython's default
thresholds (700, 10, 10) run the collector very often over a heap that holds every imported module
and every cached program: about 6% of a test file's CPU here. With these it still collects, less
often. The test workers set them in conftest.py, the test scripts run as subprocesses in their
`__main__`.
"""

import gc

THRESHOLDS = (100_000, 50, 100)


def relax_gc():
  gc.set_threshold(*THRESHOLDS)
