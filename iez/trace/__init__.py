"""What applications wrote, from the placement library's tracing mode (the paper's miniRecorder).

- :mod:`iez.trace.csvformat`: the trace and counts CSV files, read strictly;
- :mod:`iez.trace.parse`: the paper's C-Parser, merging per-process traces into
  one write request per file, and counts into runs.
"""
