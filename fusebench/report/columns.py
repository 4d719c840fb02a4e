"""The column dictionary: what every column of an exported row means (`fusebench results
--describe`, `fusebench.results()`, CSV/JSON/Parquet exports).  docs/columns.md is generated from
COLUMNS by `render_markdown()`, and a test checks that the two agree and that every stored column
is described here.
"""
from __future__ import annotations

# column -> description, in the order of an exported row.  Units are in the names.
COLUMNS: dict[str, str] = {
    # the layout of the exported row
    "export_schema": "Version of the exported rows' layout (1 here): it changes when a column is renamed or "
                     "removed or changes its meaning; added columns keep it.",
    # identity of the run
    "run_id": "Run the cell belongs to (`fusebench runs` lists them).",
    "run_started": "When the run started (local time, ISO 8601).",
    "device_name": "The device the run measured on (GPU name; the CPU's processor on the CPU).",
    "torch": "PyTorch version of the run.",
    "triton": "Triton version of the run (empty where Triton was not importable).",
    "cuda": "CUDA version PyTorch was built with (empty on a CPU-only build).",
    "run_commit": "fusebench's git commit when the run started (-dirty: with local changes).",
    # identity of the cell
    "id": "Row id in the results database.",
    "case_name": "The case: the workload computed (`fusebench list`).",
    "impl": "The implementation that computed it (eager, inductor, triton, a ceiling, a plugin's own ...).",
    "shape": "The shape as text, axes joined by x (the case's axes: see the shape_* columns).",
    "shape_<axis>": "One numeric column per axis of the case's shape, named after the axis "
                    "(shape_dim0, shape_dim1; shape_M, shape_N, shape_K; shape_batch, shape_seqlen ...); "
                    "empty for cases without that axis.",
    "dtype": "The dtype that ran (fp32, fp16, bf16).",
    "requested_dtype": "The dtype asked for; differs from dtype where it was substituted (half precision "
                       "on the CPU runs as fp32).",
    "device": "cpu or cuda.",
    "mode": "What the cell timed: fwd (the forward), bwd (the backward alone, its forward run outside the "
            "timed call) or fwd_bwd (both); min_bytes, flops and gbps are that mode's.",
    "status": "ok, mismatch (wrong answer), error, oom, timeout, crashed (worker died), skipped (cannot fit), "
              "unsupported (applies but cannot run here).",
    "reason": "Why the cell is not ok: the error, or why it is unsupported or skipped.",
    "note": "How the implementation ran: precision, the path or launch plan chosen, dtype substitution.",
    "na": "JSON {metric: why it was not measured}: nothing is estimated in its place.",
    "started": "When the cell started (local time).",
    "seconds": "Wall-clock seconds spent on the cell: compile, accuracy, timing and metrics.",
    "phase_s": "JSON {phase: wall-clock seconds} of the cell, in the order they ran (repeats summed): "
               "setup (support and memory checks), prepare (the implementation's set-up; compiles "
               "happen in the first call), inputs (made or cloned from the shape's kept set), seed<N> (the "
               "implementation's checked call on seed N: the first compiles and autotunes; in a training "
               "mode it includes the float64 reference), reference (the float64 reference, computed once "
               "per shape and seed and shared by its implementations), compare, warm_call (the GPU's "
               "second input set), timing, wall_time, metric_<family> (kernels, graph, memory, flops, "
               "roofline, compile, ncu), free (garbage collection, the GPU's cache emptied), handoff "
               "(sending the cell to a worker process and its row back: not in `seconds`).  What the "
               "other phases leave out is `seconds` less their sum.",
    "git_commit": "fusebench's commit that measured this cell (a resumed run can span several).",
    # accuracy
    "seeds": "Input seeds checked against the float64 reference.",
    "max_abs_err": "Largest absolute error against the float64 reference, over the seeds.",
    "max_rel_err": "Largest relative error against the float64 reference.",
    "tol_ratio": "Worst error as a fraction of the tolerance: at most 1 passes.",
    "atol": "Absolute tolerance, scaled by max|reference|.",
    "rtol": "Relative tolerance.",
    "tolerance": "Which tolerance judged the cell: tf32 (an fp32 cell whose GEMMs or convolutions may run in TF32 "
                 "here, judged as fp16 is: atol 2e-3, rtol 1e-2, or the case's own where looser; the note says "
                 "why), else the dtype's name (the case's own tolerance for it).  Empty where accuracy is not "
                 "checked (ceilings).",
    "err_vs_eager": "The cell's worst relative error over eager's on the same inputs (eager's floored at the dtype's "
                    "epsilon; 1 for eager itself).  Above 4 the cell is flagged as less accurate than eager.",
    # time
    "time_us": "Median time of one call, µs: CUDA events with L2 flushed before each call on the GPU; "
               "host time on the CPU.",
    "time_q20_us": "20th percentile of the repetitions, µs.",
    "time_q80_us": "80th percentile of the repetitions, µs.",
    "time_min_us": "Fastest repetition, µs.",
    "time_max_us": "Slowest repetition, µs.",
    "time_reps": "Number of timed repetitions.",
    "time_samples_us": "JSON list of every repetition's time, µs (5 significant digits): what `compare` "
                       "judges a change against.",
    "time_spread": "IQR / median of the repetitions: above 0.10 the cell is flagged as too noisy to trust.",
    "threads": "torch's intra-op threads the cell ran with: fixed per run (its timing settings hold it; on the CPU "
               "1 unless OMP_NUM_THREADS says otherwise), in whichever process measured the cell, Ray actors "
               "included.",
    "cpu_pressure": "Share of the cell's timing (time and wall_time) during which some task waited for a CPU, from "
                    "/proc/pressure/cpu (0-1); empty where the kernel does not expose it.",
    "load_per_cpu": "The 1-minute load average over the usable CPUs at the end of the cell's timing.",
    "under_load": "1 where the cell was timed while the CPU was busy: cpu_pressure above 0.10, or without it a load "
                  "average beyond the cell's own threads above half the CPUs.  Flagged in the terminal (L!) and "
                  "the report (*), and left out of the report's headline figures.",
    "wall_time_us": "Host time per call, calls back to back: what a Python caller pays, launch and "
                    "guards included, µs (the mean of as many calls as time_reps, at most the run's rep_ms "
                    "of them).",
    # analytic models
    "min_bytes": "Fewest bytes the case must move at this shape and dtype (its byte model).",
    "flops": "FLOPs the case must do (its FLOP model).",
    "gbps": "min_bytes / time: GB/s.",
    "tflops": "flops / time: TFLOP/s.",
    # Inductor
    "graphs": "Graphs Dynamo compiled for the call (Inductor).",
    "graph_breaks": "Graph breaks Dynamo took (Inductor).",
    "recompiles": "Recompiles during timing (Inductor; any fails the cell).",
    # other time views
    "graph_time_us": "Time per call replaying a CUDA graph of it, µs.",
    "kernel_time_us": "Sum of the call's kernel durations from the profiler, µs.",
    # kernels
    "kernels": "Kernels one call launches (profiler).",
    "memsets": "Memsets one call issues.",
    "memcpys": "Memcpys one call issues.",
    "kernel_names": "JSON list of the kernels one call launches.",
    # fusion facts: Inductor's own code (fusebench/fusion/facts.py)
    "generated_kernels": "Launches per call of the kernels Inductor generated (C++ on the CPU, Triton on a GPU), "
                         "counted from its output code, over every graph it compiled for the cell: the forward "
                         "in fwd, forward and backward in fwd_bwd and in bwd (whose forward runs once, outside "
                         "the timed call).  Inductor cells only.",
    "extern_kernels": "Launches per call of the library kernels (extern kernels such as mm) and ATen fallbacks in "
                      "Inductor's output code, counted as generated_kernels is.",
    "fusion_kernels": "JSON list of the kernels in Inductor's output code: graph (forward, backward, inference), "
                      "kind (generated, extern, fallback), launches per call, the ATen operators fused into it in "
                      "order, and its name.  Runs and versions are compared by graph, kind and operators, not "
                      "by name (Inductor numbers kernels and shortens long names).",
    # memory
    "peak_mem_bytes": "Peak memory allocated during one call beyond what was allocated before it.",
    "footprint_bytes": "Memory allocated during the call beyond inputs and outputs.",
    # compile
    "compile_cold_s": "Compile time in fresh caches, s (metric family compile).",
    "compile_warm_s": "Compile time with warm caches, s.",
    "flops_counted": "FLOPs counted by torch.utils.flop_counter, beside the analytic flops.",
    # Nsight Compute
    "dram_read_bytes": "DRAM bytes read by one call (Nsight Compute).",
    "dram_write_bytes": "DRAM bytes written by one call (Nsight Compute).",
    "traffic_amplification": "(DRAM read + write) / min_bytes: 1 means each byte moved once.",
    "sass_inst": "SASS instructions executed by one call (Nsight Compute).",
    "ncu_time_us": "Duration under Nsight Compute, µs.",
    # roofline
    "pct_roofline": "% of the roofline from this device's stored ceilings (`fusebench ceilings`).",
    "roofline_bound": "Which roof bounds the cell at its arithmetic intensity: memory or compute.",
    # where a cell ran, when Ray's actors measured it (fusebench run --ray); empty otherwise
    "hostname": "Host of the Ray actor that measured the cell (--ray).",
    "driver": "GPU driver version on that host (--ray).",
    "gpu_id": "The GPU Ray gave that actor, as the host numbers it (--ray).",
}
AXIS_PREFIX = "shape_"
RUN_FIELDS = {"run_started": "started", "device_name": "device_name", "torch": "torch", "triton": "triton",
              "cuda": "cuda", "run_commit": "git_commit"}


def describe(column: str) -> str | None:
    """The description of a column (shape_<axis> columns included), or None."""
    if column in COLUMNS:
        return COLUMNS[column]
    if column.startswith(AXIS_PREFIX):
        return COLUMNS[AXIS_PREFIX + "<axis>"]
    return None


def render_markdown() -> str:
    """docs/columns.md."""
    lines = ["# Result columns", "",
             "Every row of `fusebench results --format csv|json|parquet` and of `fusebench.results()` is one",
             "cell: one implementation of one case at one shape and dtype.  Empty means not measured; the",
             "`na` column says why.  `fusebench results --describe` prints this table.", "",
             "| column | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {text} |" for name, text in COLUMNS.items()]
    return "\n".join(lines) + "\n"


def render_text() -> list[tuple[str, str]]:
    return list(COLUMNS.items())
