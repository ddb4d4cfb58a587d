"""experiments/benchmarks/op_profile.py: self times of nested trace events, the kinds of XLA:CPU
ops, and a breakdown of a real traced program."""

import jax
import jax.numpy as jnp

from experiments.benchmarks import op_profile


def event(name, ts, dur, tid=1):
  return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_self_time_is_the_duration_less_the_directly_nested_events():
  events = [
    event("ThunkExecutor::Execute", 0, 100),
    event("while.3", 10, 60),
    event("ThunkExecutor::Execute", 12, 50),
    event("add_fusion.1", 15, 20),
    event("dot.2", 40, 10),
    event("copy.4", 80, 5),
    event("copy.4", 5, 30, tid=2),  # another thread: not nested in thread 1's events
  ]
  times = sorted(op_profile.self_times(events))
  assert times == sorted(
    [
      ("ThunkExecutor::Execute", 100 - 60 - 5),
      ("while.3", 60 - 50),
      ("ThunkExecutor::Execute", 50 - 20 - 10),
      ("add_fusion.1", 20),
      ("dot.2", 10),
      ("copy.4", 5),
      ("copy.4", 30),
    ]
  )


def test_op_kinds_by_hlo_name_and_host_events_left_out():
  assert op_profile.op_kind("ThunkExecutor::Execute") == "dispatch between kernels"
  assert op_profile.op_kind("while.1051") == "loop control (while)"
  assert op_profile.op_kind("sort.23") == "sort"
  assert op_profile.op_kind("ynn_fusion.2") == "dot"
  assert op_profile.op_kind("copy.106") == "copy / transpose"
  assert op_profile.op_kind("bitcast_dynamic-update-slice_fusion.3") == "slice / gather / scatter"
  assert op_profile.op_kind("add_tanh_fusion.1") == "fusion / elementwise / reduce"
  for host in ("$profiler.py:307 trace", "PjitFunction(f)", "end: copy.187"):
    assert op_profile.op_kind(host) is None
  assert op_profile.op_kind("ThunkExecutor::Execute (wait for completion)") is None


def test_breakdown_of_a_traced_loop_counts_its_kernels(tmp_path):
  """A 50-step loop of a matrix product and a tanh: at least one dot per step is counted, and
  the trace is complete."""

  @jax.jit
  def loop(x):
    return jax.lax.fori_loop(0, 50, lambda _, c: jnp.tanh(c @ c), x)

  x = jnp.eye(8) * 0.5
  jax.block_until_ready(loop(x))
  profile = op_profile.breakdown(op_profile.trace_events(lambda: loop(x), str(tmp_path)))
  assert not profile["truncated"]
  assert profile["kernels_by_kind"]["dot"] >= 50
  assert profile["kernels"] == sum(profile["kernels_by_kind"].values())
  assert profile["traced_seconds"] > 0


def test_perf_report_lines_summed_by_kind_of_work():
  report = "\n".join(
    [
      "# Samples: 7K of event 'cpu-clock:ppp'",
      "    17.29%  libjax_common.so  [.] ynn::dot_fp32_5x64x1_1x16x1_avx512",
      "     5.04%  libjax_common.so  [.] xla::cpu::ThunkExecutor::ProcessCompletedOutEdges<true>",
      "     2.16%  libjax_common.so  [.] std::__move_merge<xla::cpu::SortIterator, absl::Span>",
      "     0.48%  [JIT] tid 28744   [.] 0x00007fa5a5ed4000",
      "     0.35%  [JIT] tid 28744   [.] 0x00007fa5a601f1cc",
      "     1.34%  libc.so.6         [.] _int_free",
      "     0.10%  libm.so.6         [.] tanhf",
      "",
    ]
  )
  assert op_profile.perf_categories(report) == {
    "matrix products (YNNPACK kernels)": 17.3,
    "XLA runtime (dispatch)": 5.0,
    "sort": 2.2,
    "malloc / free": 1.3,
    "XLA-generated kernels": 0.8,
    "other": 0.1,
  }
