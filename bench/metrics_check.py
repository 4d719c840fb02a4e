"""GPU validation of the metric families against the issue's "done when" items.

    PYTHONPATH=. python bench/metrics_check.py [--budget-s 240]

Prints, and writes under $OUT (or /tmp/metrics_check) as metrics_check.txt / .json, with the
ceilings stored in fb.db there and two raw ncu logs kept:
1. pointwise_chain 4096x4096 fp32: kernels launched by eager and by Inductor (profiler);
2. softmax 8192x8192 fp32 eager: ncu DRAM bytes read and written vs the analytic 256 MiB each;
3. double_softmax and norm_chain 8192x8192 fp32: traffic amplification, eager and Inductor, with
   the kernels each launched (to explain the amplification);
4. `time` (fusebench.measure.timing.time_call) vs ncu gpu__time_duration for five cases at
   8192x8192 fp32 (256 MiB per tensor);
5. Inductor compile time cold vs warm;
6. `fusebench ceilings` (measured, stored, read back).
Each section is guarded: a failure prints its reason and the next section runs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fusebench.cases import get_case  # noqa: E402
from fusebench.impls import get_impl  # noqa: E402
from fusebench.measure.timing import TimingSettings, time_call  # noqa: E402
from fusebench.metrics import MetricContext, get_metric  # noqa: E402

OUT = os.environ.get("OUT") or "/tmp/metrics_check"
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "metrics_check.txt"), "w")
RESULTS: dict = {}
T0 = time.time()
MIB = 1 << 20


def say(*parts) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


class Cell:
    """One prepared cell on the GPU, with a MetricContext for the families."""

    def __init__(self, case_name, impl_name, shape, dtype=torch.float32):
        self.case, self.impl = get_case(case_name), get_impl(impl_name)
        self.shape, self.dtype = tuple(shape), dtype
        self.prepared = self.impl.prepare(self.case, self.shape, dtype, "cuda")
        self.args = self.case.make_inputs(self.shape, dtype, "cuda", 0)
        with self.prepared.context(), torch.no_grad():
            self.prepared.fn(*self.args)
            torch.cuda.synchronize()
        self.row = {"min_bytes": self.case.min_bytes(self.shape, dtype), "flops": self.case.flops(self.shape, dtype)}

    def time(self) -> float:
        with self.prepared.context(), torch.no_grad():
            stats = time_call(lambda: self.prepared.fn(*self.args), "cuda", TimingSettings())
        self.row["time_us"] = stats.median_us
        return stats.median_us

    def metric(self, family: str, db_path=None) -> dict:
        ctx = MetricContext(self.case, self.impl, self.prepared, self.args, self.shape, self.dtype, "cuda",
                            self.row, db_path)
        with self.prepared.context(), torch.no_grad():
            return get_metric(family)(ctx)

    def free(self):
        del self.args, self.prepared
        torch.cuda.empty_cache()


def section(name, budget_s):
    def deco(fn):
        def run(*a, **k):
            left = budget_s - (time.time() - T0)
            say(f"\n=== {name}  (t={time.time() - T0:.0f}s)")
            if left < 15:
                say(f"skipped: {left:.0f} s of the budget left")
                RESULTS[name] = {"skipped": "budget"}
                return
            t = time.time()
            try:
                fn(*a, **k)
            except Exception as exc:
                say(f"FAILED: {type(exc).__name__}: {exc}")
                say(traceback.format_exc(limit=4))
                RESULTS.setdefault(name, {})["error"] = f"{type(exc).__name__}: {exc}"
            say(f"--- {name}: {time.time() - t:.1f} s")
        return run
    return deco


def ncu_of(case_name, impl_name, shape, keep=None) -> dict:
    from fusebench.metrics.ncu import run_ncu

    case = get_case(case_name)
    parsed: list = []
    r = run_ncu(case, impl_name, shape, "fp32", case.min_bytes(shape, torch.float32), timeout=150,
                keep_log=os.path.join(OUT, keep) if keep else None, parsed_out=parsed)
    r["kernel_names"] = [k["name"][:90] for k in parsed[0]["kernels"]] if parsed else []
    return r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-s", type=float, default=240.0)
    a = ap.parse_args()
    B = a.budget_s
    db = os.path.join(OUT, "fb.db")

    from fusebench.metrics.ncu import find_ncu

    ncu = find_ncu()
    ver = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1] if ncu else None
    import triton

    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "ncu": ver, "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size}
    RESULTS["env"] = env
    say("env:", json.dumps(env))

    @section("1 kernels launched: pointwise_chain 4096x4096 fp32", B)
    def kernels():
        res = {}
        for impl in ("eager", "inductor"):
            c = Cell("pointwise_chain", impl, (4096, 4096))
            k = c.metric("kernels")
            t = c.time()
            g = c.metric("graph")
            m = c.metric("memory")
            res[impl] = {"kernels": k.get("kernels"), "memsets": k.get("memsets"), "memcpys": k.get("memcpys"),
                         "kernel_names": k.get("kernel_names"), "kernel_time_us": k.get("kernel_time_us"),
                         "time_us": t, "graph_time_us": g.get("graph_time_us"), "peak_mem_bytes": m.get("peak_mem_bytes"),
                         "footprint_bytes": m.get("footprint_bytes"), "na": {**k.get("na", {}), **g.get("na", {}),
                                                                               **m.get("na", {})}}
            gt = g.get("graph_time_us")
            say(f"{impl:9s} kernels={k.get('kernels')} memsets={k.get('memsets')} memcpys={k.get('memcpys')} "
                f"kernel_time={k.get('kernel_time_us', 0):.1f}us time={t:.1f}us "
                f"graph_time={'n/a' if gt is None else f'{gt:.1f}us'} "
                f"peak={m.get('peak_mem_bytes')} footprint={m.get('footprint_bytes')}")
            for name, n in k.get("kernel_names") or []:
                say(f"           {n} x {name[:110]}")
            if k.get("na") or g.get("na") or m.get("na"):
                say("           na:", res[impl]["na"])
            c.free()
        res["pass"] = res["eager"]["kernels"] == 4 and res["inductor"]["kernels"] == 1
        say("DONE-WHEN eager 4 / inductor 1:", "PASS" if res["pass"] else "FAIL")
        RESULTS["kernels"] = res

    @section("2 softmax 8192x8192 fp32 eager: ncu DRAM bytes vs analytic 256 MiB", B)
    def softmax_dram():
        r = ncu_of("softmax", "eager", (8192, 8192), keep="ncu_softmax_eager.csv")
        analytic = 8192 * 8192 * 4
        res = dict(r)
        if "dram_read_bytes" in r and "dram_write_bytes" in r:
            res["read_ratio"] = r["dram_read_bytes"] / analytic
            res["write_ratio"] = r["dram_write_bytes"] / analytic
            res["pass"] = abs(res["read_ratio"] - 1) <= 0.03 and abs(res["write_ratio"] - 1) <= 0.03
            say(f"read {r['dram_read_bytes']:,} B ({res['read_ratio']:.4f} x 256 MiB), write {r['dram_write_bytes']:,} B "
                f"({res['write_ratio']:.4f} x 256 MiB), sass_inst {r.get('sass_inst')}, ncu_time {r.get('ncu_time_us')} us, "
                f"kernels {r['kernel_names']}")
            say("DONE-WHEN within 3%:", "PASS" if res["pass"] else "FAIL")
        else:
            say("ncu gave no DRAM bytes:", r.get("na"))
        RESULTS["softmax_dram"] = res

    @section("3+4 traffic amplification and time vs ncu gpu__time_duration, 8192x8192 fp32", B)
    def amplification_and_time():
        plan = [("softmax", "eager"), ("double_softmax", "eager"), ("double_softmax", "inductor"),
                ("norm_chain", "eager"), ("norm_chain", "inductor"), ("pointwise_chain", "eager"),
                ("layernorm", "eager")]
        res = {}
        for case_name, impl in plan:
            if time.time() - T0 > B - 20:
                say(f"{case_name} {impl}: skipped (budget)")
                continue
            shape = (8192, 8192)
            c = Cell(case_name, impl, shape)
            t = c.time()
            k = c.metric("kernels")
            c.free()
            keep = None
            if (case_name, impl) == ("softmax", "eager") and "dram_read_bytes" in RESULTS.get("softmax_dram", {}):
                r = {kk: vv for kk, vv in RESULTS["softmax_dram"].items()}
            else:
                r = ncu_of(case_name, impl, shape, keep=keep)
            entry = {"time_us": t, "kernels": k.get("kernels"), "kernel_time_us": k.get("kernel_time_us"),
                     "profiler_kernels": [n[:90] for n, _ in k.get("kernel_names") or []],
                     **{kk: r.get(kk) for kk in ("dram_read_bytes", "dram_write_bytes", "traffic_amplification",
                                                 "sass_inst", "ncu_time_us", "na", "kernel_names")}}
            if r.get("ncu_time_us"):
                entry["time_over_ncu"] = t / r["ncu_time_us"]
            res[f"{case_name}/{impl}"] = entry
            ta = r.get("traffic_amplification")
            say(f"{case_name:15s} {impl:9s} time={t:8.1f}us ncu_time={r.get('ncu_time_us') or float('nan'):8.1f}us "
                f"time/ncu={entry.get('time_over_ncu', float('nan')):.3f} amplification="
                f"{ta if ta is None else round(ta, 3)} read={r.get('dram_read_bytes')} write={r.get('dram_write_bytes')} "
                f"kernels={k.get('kernels')} {entry['profiler_kernels']}")
            if r.get("na"):
                say("   na:", r["na"])
        agree = [kk for kk, v in res.items() if v.get("time_over_ncu") and abs(v["time_over_ncu"] - 1) <= 0.10]
        say(f"DONE-WHEN time vs ncu within 10%: {len(agree)} cells agree: {agree}")
        RESULTS["amplification_time"] = res
        # % of roofline of these cells through the roofline family, against the stored ceilings
        from fusebench.metrics.roofline import measure as roofline_of

        for key, v in res.items():
            case_name, impl = key.split("/")
            case = get_case(case_name)
            ctx = MetricContext(case, get_impl(impl), None, (), (8192, 8192), torch.float32, "cuda",
                                {"time_us": v["time_us"], "min_bytes": case.min_bytes((8192, 8192), torch.float32),
                                 "flops": case.flops((8192, 8192), torch.float32)}, db)
            r = roofline_of(ctx)
            v["pct_roofline"] = r.get("pct_roofline")
            say(f"   roofline {key:26s} {r.get('pct_roofline') or float('nan'):.1f}% {r.get('roofline_bound')} "
                f"{r.get('na') or ''}")

    @section("5 Inductor compile time cold vs warm", B)
    def compile_time():
        res = {}
        for case_name, shape in (("pointwise_chain", (4096, 4096)), ("softmax", (8192, 8192))):
            c = Cell(case_name, "inductor", shape)
            r = c.metric("compile")
            c.free()
            res[case_name] = r
            say(f"{case_name}: cold={r.get('compile_cold_s')} s warm={r.get('compile_warm_s')} s "
                f"{r.get('na') or ''} | {r.get('note')}")
        res["pass"] = all((v.get("compile_cold_s") or 0) > (v.get("compile_warm_s") or 1e9) for v in res.values()
                          if isinstance(v, dict))
        say("DONE-WHEN cold > warm:", "PASS" if res["pass"] else "FAIL")
        RESULTS["compile"] = res

    @section("6 ceilings", B)
    def ceilings():
        from fusebench.ceilings import format_ceilings, load_ceilings, run_ceilings

        name, c = run_ceilings(db, "cuda")
        for line in format_ceilings(name, c):
            say(line)
        back = load_ceilings(db, name)
        say(f"stored in {db}: {sorted(back)}")
        RESULTS["ceilings"] = {"device_name": name, **{k: v.get("value") for k, v in back.items()}}

    @section("7 triton compile (child processes) and the ncu/graph/memory families via get_metric", B)
    def extra():
        c = Cell("softmax", "triton", (8192, 8192))
        for fam in ("compile", "graph", "memory", "kernels"):
            r = c.metric(fam)
            say(f"triton softmax {fam}: {json.dumps(r, default=str)[:400]}")
            RESULTS.setdefault("triton_softmax", {})[fam] = r
        c.free()

    @section("8 show: softmax 8192x8192 fp32, inductor (with ncu) and triton", B)
    def show():
        from rich.console import Console

        from fusebench.metrics.show import print_show, show_cell

        with open(os.path.join(OUT, "show.txt"), "w") as f:
            console = Console(file=f, width=170, color_system=None)
            for impl, ncu in (("inductor", True), ("triton", False)):
                r = show_cell("softmax", impl, "8192x8192", device="cuda", with_ncu=ncu, db_path=db)
                print_show(r, console, code_lines=80)
                say(f"show softmax {impl}: status={r['status']} {r['reason'] or ''} kernels={r['row'].get('kernels')} "
                    f"profiled kernels={[(k['name'][:40], round(k['dur_us'], 1)) for k in r['kernels']]} "
                    f"code graphs={len(r['code'])} autotune={r['autotune']} ncu kernels={len(r['ncu_kernels'])} "
                    f"pct_roofline={r['row'].get('pct_roofline')} na={r['na']}")
                RESULTS.setdefault("show", {})[impl] = {k: v for k, v in r.items() if k != "code"}

    kernels()
    ceilings()
    softmax_dram()
    amplification_and_time()
    compile_time()
    extra()
    show()
    say(f"\ntotal {time.time() - T0:.0f} s")
    with open(os.path.join(OUT, "metrics_check.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
