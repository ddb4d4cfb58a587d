"""Where a compiled program's time goes, op by op: one traced execution, read back.

XLA:CPU records every thunk it runs (one kernel: a fusion, a dot, a copy, a sort, the control of a
while loop, ...) as a trace event named after its HLO instruction, nested in
`ThunkExecutor::Execute` events (the runtime walking one sequence of thunks: a program, a loop
body, a branch). `trace_events` runs a function under `jax.profiler.trace` and reads the Perfetto
trace it writes; `breakdown` turns the events into self times (an event's duration minus that of
the events nested in it on the same thread) summed by kind of op (`op_kind`), so that two
implementations of one algorithm can be compared by what their programs spend time on: the
kernels' arithmetic, the runtime's dispatch between small kernels, or the loops' control.

The trace costs time of its own, about a microsecond per event, while a kernel of a small RL
program runs in a tenth of that: the traced seconds overstate the cheap kernels many times over.
What a breakdown measures exactly is how many kernels of each kind a program runs; its seconds
say only where the large kernels are. The profiler keeps at most `MAX_EVENTS` events; a trace
that reaches it is cut short (`breakdown` says so).
"""

import collections
import glob
import gzip
import json
import os
import re
from typing import Callable

# The runtime's own events: the walk over a sequence of thunks (its self time is the dispatch
# between kernels) and the host side of a call.
DISPATCH = "ThunkExecutor::Execute"
HOST_EVENTS = ("PjitFunction", "ParseArguments", "PjRt", "TfrtCpu", "Thunk::", "CommonPjRt")
MAX_EVENTS = 1_000_000


def trace_events(run: Callable[[], object], directory: str) -> list[dict]:
  """The complete ('X') events of one call of `run`, traced into `directory`."""
  import jax

  os.makedirs(directory, exist_ok=True)
  before = set(glob.glob(os.path.join(directory, "**", "perfetto_trace.json.gz"), recursive=True))
  with jax.profiler.trace(directory, create_perfetto_trace=True):
    jax.block_until_ready(run())
  after = set(glob.glob(os.path.join(directory, "**", "perfetto_trace.json.gz"), recursive=True))
  (path,) = after - before
  with gzip.open(path) as f:
    trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  return [e for e in events if e.get("ph") == "X" and "dur" in e]


def self_times(events: list[dict]) -> list[tuple[str, float]]:
  """`(name, self time in microseconds)` of every event: its duration minus the durations of the
  events directly nested in it (same process and thread, inside its interval)."""
  by_thread = collections.defaultdict(list)
  for event in events:
    by_thread[(event.get("pid"), event.get("tid"))].append(event)
  out = []
  for thread in by_thread.values():
    thread.sort(key=lambda e: (e["ts"], -e["dur"]))  # a parent before the children it contains
    stack: list[list] = []  # [name, end, duration, children's duration]
    for event in thread:
      start, duration = event["ts"], event["dur"]
      while stack and stack[-1][1] <= start:
        name, _, total, children = stack.pop()
        out.append((name, total - children))
      if stack:
        stack[-1][3] += duration
      stack.append([event["name"], start + duration, duration, 0.0])
    out.extend((name, total - children) for name, _, total, children in stack)
  return out


def op_kind(name: str) -> str | None:
  """The kind of an XLA:CPU event, by its HLO instruction name; None for host-side events
  (Python frames, the call's argument handling)."""
  if name == DISPATCH:
    return "dispatch between kernels"
  if name.startswith(("$", "end: ")) or name.startswith(HOST_EVENTS) or "wait" in name:
    return None  # the host (Python, the call, its wait) and the markers of a kernel's end
  base = re.sub(r"\.\d+$", "", name)
  if base.startswith("while"):
    return "loop control (while)"
  if base.startswith("conditional"):
    return "conditional"
  if "sort" in base:
    return "sort"
  if "dot" in base or "ynn" in base or "convolution" in base:
    return "dot"
  if "dynamic" in base or "scatter" in base or "gather" in base or "slice" in base:
    return "slice / gather / scatter"
  if base.startswith(("copy", "transpose", "bitcast")):
    return "copy / transpose"
  if base.startswith(("all-", "reduce-scatter", "collective")):
    return "collective"
  if "fusion" in base or base.startswith(("add", "multiply", "reduce", "select", "compare")):
    return "fusion / elementwise / reduce"
  return "other"


def breakdown(events: list[dict], top: int = 8) -> dict:
  """The kernels run by kind of op, their traced self seconds by kind, and the `top` ops by
  traced self time (name, seconds, calls); `truncated` if the trace reached `MAX_EVENTS`."""
  counts: dict[str, int] = collections.defaultdict(int)
  kinds: dict[str, float] = collections.defaultdict(float)
  ops: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
  kernels = 0
  for name, micros in self_times(events):
    kind = op_kind(name)
    if kind is None:
      continue
    kinds[kind] += micros / 1e6
    if name != DISPATCH:
      kernels += 1
      counts[kind] += 1
      ops[name][0] += micros / 1e6
      ops[name][1] += 1
  total = sum(kinds.values())
  return {
    "truncated": len(events) >= MAX_EVENTS,
    "kernels": kernels,
    "kernels_by_kind": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
    "traced_seconds": round(total, 4),
    "traced_seconds_by_kind": {
      k: round(v, 4) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
    },
    "top_ops": [
      [name, round(seconds, 4), calls]
      for name, (seconds, calls) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:top]
    ],
  }


# ----------------------------------------------------------------------------------------------
# Sampled profiles: where the untraced program's CPU time goes, by kind of work.
# ----------------------------------------------------------------------------------------------

# (category, pattern on the symbol): the first match wins. XLA's generated kernels have no symbol
# (perf shows `[JIT]` or an address); the runtime is the thunk executor and its async plumbing.
PERF_CATEGORIES = (
  ("matrix products (YNNPACK kernels)", r"ynn::dot|dot_fp32"),
  ("YNNPACK call overhead", r"ynn::|slinky|Ynn"),
  ("matrix products (Eigen)", r"Eigen"),
  ("sort", r"[Ss]ort|__move_merge|__merge|insertion|__unguarded"),
  ("malloc / free", r"malloc|free|memalign|consolidate"),
  ("memcpy / memset", r"memmove|memcpy|memset"),
  ("XLA-generated kernels", r"\[JIT\]|^0x[0-9a-f]+$"),
  ("XLA runtime (dispatch)", r"Thunk|AsyncValue|Chain|absl|tsl::"),
)


def perf_categories(report: str) -> dict[str, float]:
  """Percent of samples by kind of work, from the text of `perf report --no-children --sort
  dso,sym -g none` (lines `  12.34%  <dso>  [.] <symbol>`); what matches no category is
  "other". A sampled profile of the untraced program: the cost model a trace is not."""
  shares: dict[str, float] = collections.defaultdict(float)
  for line in report.splitlines():
    match = re.match(r"\s*([\d.]+)%\s+(\S.*?)\s+\[[.k]\]\s+(.*)$", line)
    if not match:
      continue
    percent, dso, symbol = float(match.group(1)), match.group(2), match.group(3).strip()
    name = symbol if not dso.startswith("[JIT]") else "[JIT]"
    category = next((c for c, pattern in PERF_CATEGORIES if re.search(pattern, name)), "other")
    shares[category] += percent
  return {c: round(p, 1) for c, p in sorted(shares.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
  import sys

  if len(sys.argv) != 2:
    sys.exit("usage: python -m experiments.benchmarks.op_profile <perf report text file>")
  with open(sys.argv[1]) as f:
    print(json.dumps(perf_categories(f.read())))
