"""Guarding fusion decisions: a committed baseline of each cell's kernels, operators, graph breaks,
accuracy and time, and the check that holds a run to it (`fusebench check`, the pytest plugin).

- baseline.py: the file (TOML or JSON), its entries and device classes
- verify.py: measuring the baseline's cells and judging each against its entry; --update
- assertions.py: `fusebench.assert_fused` and `inspect`, one function's fusion checked in a test
"""
