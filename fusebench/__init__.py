"""fusebench: a benchmark and test suite for GPU kernel fusion."""
__version__ = "0.1.0"
