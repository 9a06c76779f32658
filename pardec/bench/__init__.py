"""`pardec bench`: method parsing and runners (methods.py), the interleaved run (run.py), the report
(report.py), and a whole bench from its options (session.py)."""

from .methods import MethodSpec, parse_methods
from .report import markdown_table
from .run import BenchResult, RunRecord, run_bench
from .session import BenchOptions, bench

__all__ = [
    "BenchOptions",
    "BenchResult",
    "MethodSpec",
    "RunRecord",
    "bench",
    "markdown_table",
    "parse_methods",
    "run_bench",
]
