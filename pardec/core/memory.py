"""What the process holds in memory: resident set now and at its peak (Linux)."""

from __future__ import annotations

import os
import resource


def peak_rss_mb() -> float:
    """The process's largest resident set so far, in MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """The process's resident set now, in MiB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: the peak is the best there is
        return peak_rss_mb()
