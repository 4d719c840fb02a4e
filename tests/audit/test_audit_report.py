"""An audit's page and two audits' page: self-contained, the estimate named as one, names escaped."""
import base64
import re

from audit_fixtures import store_audit, synthetic_audit
from fusebench.report.audit import render_audit_compare, render_audit_report
from fusebench.store import Store


def figures(html: str) -> list[str]:
    return [base64.b64decode(uri).decode() for uri in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)]


def test_the_page_draws_time_by_class_and_the_ranked_regions(db, tmp_path):
    result = synthetic_audit(backends=("eager", "inductor", "inductor-max-autotune"),
                             failed={"inductor-max-autotune": "oom"})
    rid = store_audit(db, result)
    with Store.open(db, create=False) as st:
        path = render_audit_report(st, rid, str(tmp_path / "a.html"))
    html = open(path, encoding="utf-8").read()
    svgs = figures(html)
    assert len(svgs) == 2  # the classes of every backend; the regions of inductor
    assert "gemm" in svgs[0] and "between kernels" in svgs[0] and "oom" in svgs[0]
    assert "ideal (estimate)" in svgs[1] and "gap 28.6 µs" in svgs[1]
    assert "Opportunities in inductor" in html and "<b>estimate</b>" in html
    assert html.index("rmsnorm-like") < html.index("swiglu-like")
    assert "gradient accumulation (AccumulateGrad)" in html and "aten::add_" in html
    assert "inductor-max-autotune: oom: CUDA out of memory" in html
    assert "NVIDIA H100 80GB HBM3" in html
    assert "http://" not in html and "https://" not in html  # self-contained


def test_names_are_escaped_in_the_page(db, tmp_path):
    result = synthetic_audit()
    result.regions[0].label = "<script>alert(1)</script>"
    rid = store_audit(db, result)
    with Store.open(db, create=False) as st:
        html = open(render_audit_report(st, rid, str(tmp_path / "a.html")), encoding="utf-8").read()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


def test_the_comparison_page_sets_two_audits_side_by_side(db, tmp_path):
    a = store_audit(db, synthetic_audit(backends=("eager", "inductor")))
    b = store_audit(db, synthetic_audit(backends=("eager", "inductor-max-autotune"), scale=0.8),
                    env={"device": "cuda", "device_name": "NVIDIA H200", "torch": "2.14.0"})
    with Store.open(db, create=False) as st:
        html = open(render_audit_compare(st, a, st, b, str(tmp_path / "c.html")), encoding="utf-8").read()
    assert "run 1 vs run 2" in html
    assert "inductor / inductor-max-autotune" in html  # two compile modes measured apart, paired
    assert "torch 2.13.0 → 2.14.0" in html and "device_name NVIDIA H100 80GB HBM3 → NVIDIA H200" in html
    svgs = figures(html)
    assert len(svgs) == 2 and "· A" in svgs[0] and "· B" in svgs[0]
    assert "1.25×" in html  # 400 µs in A, 320 µs in B
