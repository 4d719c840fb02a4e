"""Session 10 call 4 against call 1: per case, our Triton kernel against Inductor under the clean flush
(shapes > 64 MiB of input), and the clean/evict_last time ratios of triton and memcpy (same cells)."""
import math, sqlite3, sys
new, old = sys.argv[1], sys.argv[2]
def load(p, impl):
    return {(c, s): t for c, s, t in sqlite3.connect(p).execute(
        "select case_name, shape, time_us from cells where impl=? and status='ok' and dtype='fp32'", (impl,))}
tri, ind, cp = load(new, "triton"), load(new, "inductor"), load(new, "memcpy")
tri1, cp1 = load(old, "triton"), load(old, "memcpy")
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
print(__doc__)
print(f"{'case':32s} {'n':>3s} {'tri vs ind':>10s} {'worst':>18s}  {'clean/evict_last triton':>24s} {'memcpy':>7s}  below 0.95x Inductor")
for c in sorted({c for c, _ in tri}):
    ks = [k for k in tri if k[0] == c and k in ind]
    r = {k: ind[k] / tri[k] for k in ks}
    w = min(ks, key=r.get)
    f = gm([tri[k] / tri1[k] for k in tri if k[0] == c and k in tri1])
    fc = gm([cp[k] / cp1[k] for k in cp if k[0] == c and k in cp1])
    below = ", ".join(f"{k[1]} {r[k]:.3f}" for k in sorted(ks, key=r.get) if r[k] < 0.95)
    print(f"{c:32s} {len(ks):3d} {gm(list(r.values())):9.3f}x {w[1]:>12s} {r[w]:.3f}  {f:24.3f} {fc:7.3f}  {below or '-'}")
