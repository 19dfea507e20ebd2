"""Monitoring a prediction log where it lives: one pure kernel, exact merges, thin adapters.

A team's predictions land in a table (parquet files, a lake table behind Spark) at 10⁷–10⁹ rows
a month, with labels arriving later in another table. This package computes the monitor's
per-batch statistics from such a table without holding it in memory, and exactly:

* :mod:`.frozen` — the fitted calibrators frozen as bytes (the snapshot codec's JSON + arrays,
  never pickle), the state the kernel runs on wherever it runs;
* :mod:`.columns` — which columns of a log hold the id, the bucket (one bucket is one batch of
  the monitor), the probabilities, the label and the Mondrian category, checked against a schema;
* :mod:`.kernel` — the one kernel: an Arrow ``RecordBatch`` of logged rows in, an Arrow
  ``RecordBatch`` of partial statistics keyed by (bucket, calibrator, field, index) out. Every
  statistic is a sum (or, for the few per-calibrator constants such as α, the same value
  everywhere), so partial tables from any split of the log reduce with a plain group-by sum;
* :mod:`.fold` — that reduction as a running sum (Arrow's group-by), which ``observe_table``'s
  chunks and Spark's tasks and shards fold with (Spark and Dask also run their own aggregations);
* :mod:`.reduce` — the statistics objects rebuilt from the reduced table;
* :mod:`.slice_partials` — a slicing monitor's slice columns (``meta=``) encoded chunk by chunk
  and counted per bucket and cell, as one more summed statistic of the kernel (exact integers);
* :mod:`.commit` — the reduced statistics merged into a monitor, all or nothing;
* :mod:`.table` — the embedded default: parquet, polars and pyarrow sources streamed in chunks
  (``Monitor.observe_table`` / ``Monitor.label_table``);
* :mod:`calwatch.scale.spark` and :mod:`calwatch.scale.dask` — the same kernel on a cluster
  (Spark's adapter also has :mod:`.spark_tasks`, :mod:`.spark_ids`, :mod:`.spark_arrow` and
  :mod:`.spark_scan`: what its tasks run, its id check, its Arrow types, files read by the workers).

Nothing here imports Spark or Dask; those adapters import them when called.
"""
