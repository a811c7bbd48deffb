#!/usr/bin/env python3
"""What is live on the GPU at the step's allocated peak, from a PyTorch memory snapshot.

harness.py --memory-history PATH records torch.cuda.memory._record_memory_history from the
child's start, allocates a marker block of MARKER_BYTES just before its step loop (freed at once),
and dumps the snapshot after the loop. This replays the snapshot's trace as PyTorch's
allocated-bytes counter moves (up at "alloc", down at "free_requested": the caching allocator
decrements its stats there, before a record_stream'd block is reusable), each request rounded
up to 512 B as the allocator rounds it, finds the largest total after the marker, and groups the
blocks live at that moment by the innermost Python frame in DeepSpeed, transformers or the
harness (autograd's own allocations, made on its C++ thread, have no Python frame: grouped by
size). Needs no torch:
    python3 memory_peak.py SNAPSHOT.pickle [--json OUT]

It also says where the reserved bytes went, per stream (the caching allocator keeps each
stream's segments for that stream's requests): at the reserved peak, each stream's segments and
how much of them was not live, and the segments taken after the marker; the names come from the
frame of the first block allocated on the stream.
"""
import argparse
import collections
import json
import pickle
import sys

MARKER_BYTES = 12345 * 512  # an allocation size nothing else in the step asks for
OWN = ("deepspeed/", "transformers/", "harness.py", "account.py")


def round_size(n):
    return 512 if n < 512 else (n + 511) // 512 * 512


def where(frames):
    """The innermost frame of DeepSpeed, transformers or the harness: 'path:line name'."""
    for f in frames or ():
        name = f.get("filename", "")
        if any(k in name for k in OWN):
            short = "/".join(name.split("/")[-2:])
            return f"{short}:{f.get('line')} {f.get('name')}"
    return None


def events(snapshot):
    for trace in snapshot.get("device_traces", []):
        for e in trace:
            if e.get("action") in ("alloc", "free_requested"):
                yield e


def replay(evs):
    """(marker index, peak index, peak bytes) over the allocated counter after the marker."""
    cur, marker, peak, peak_at = 0, None, -1, None
    live = {}
    for i, e in enumerate(evs):
        if e["action"] == "alloc":
            live[e["addr"]] = round_size(e["size"])
            cur += live[e["addr"]]
            if marker is None and e["size"] == MARKER_BYTES:
                marker = i
        else:
            cur -= live.pop(e["addr"], 0)
        if marker is not None and i > marker and cur > peak:
            peak, peak_at = cur, i
    return marker, peak_at, peak


def live_at(evs, upto):
    live = {}
    for e in evs[:upto + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        else:
            live.pop(e["addr"], None)
    return live


def analyze(snapshot):
    evs = list(events(snapshot))
    marker, peak_at, peak = replay(evs)
    if marker is None:
        raise SystemExit(f"memory_peak: no marker block of {MARKER_BYTES} B in the trace "
                         "(was it recorded by harness.py --memory-history?)")
    live = live_at(evs, peak_at)
    groups = collections.defaultdict(lambda: {"bytes": 0, "count": 0, "sizes": collections.Counter(),
                                              "frames": None})
    for e in live.values():
        key = where(e.get("frames")) or f"<no python frame> {round_size(e['size'])} B"
        g = groups[key]
        g["bytes"] += round_size(e["size"])
        g["count"] += 1
        g["sizes"][round_size(e["size"])] += 1
        if g["frames"] is None:
            g["frames"] = [f"{f.get('filename', '').split('/')[-1]}:{f.get('line')} {f.get('name')}"
                           for f in (e.get("frames") or [])[:8]]
    rows = sorted(({"where": k, "bytes": g["bytes"], "count": g["count"],
                    "sizes": {str(s): c for s, c in g["sizes"].most_common(4)}, "frames": g["frames"]}
                   for k, g in groups.items()), key=lambda r: -r["bytes"])
    recent = [{"action": e["action"], "bytes": round_size(e["size"]), "where": where(e.get("frames"))}
              for e in evs[max(marker + 1, peak_at - 11):peak_at + 1]]
    return {"events": len(evs), "marker_index": marker, "peak_index": peak_at, "peak_bytes": peak,
            "live_blocks": len(live), "groups": rows, "events_before_peak": recent}


def streams(snapshot):
    """Per stream: reserved bytes (segment_alloc / segment_free) and live bytes (alloc until
    free_completed, when the block is reusable), at the reserved peak over the whole trace, and
    the segments allocated after the marker."""
    reserved, live, name = collections.Counter(), collections.Counter(), {}
    live_blocks = {}
    peak, at_peak, after_marker, new_segments = -1, None, False, []
    for trace in snapshot.get("device_traces", []):
        for e in trace:
            a, st = e.get("action"), e.get("stream", 0)
            if a == "segment_alloc":
                reserved[st] += e["size"]
                if after_marker:
                    new_segments.append({"stream": st, "bytes": e["size"]})
            elif a == "segment_free":
                reserved[st] -= e["size"]
            elif a == "alloc":
                live_blocks[e["addr"]] = (st, round_size(e["size"]))
                live[st] += round_size(e["size"])
                name.setdefault(st, where(e.get("frames")) or "<no python frame>")
                if e["size"] == MARKER_BYTES:
                    after_marker = True
            elif a == "free_completed" and e["addr"] in live_blocks:
                bst, b = live_blocks.pop(e["addr"])
                live[bst] -= b
            total = sum(reserved.values())
            if total > peak:
                peak, at_peak = total, (dict(reserved), dict(live))
    rows = []
    if at_peak:
        res, lv = at_peak
        rows = [{"stream": st, "first_block_from": name.get(st, "?"), "reserved": res[st],
                 "not_live": res[st] - lv.get(st, 0)} for st in sorted(res) if res[st]]
    return {"reserved_peak_bytes": max(peak, 0), "at_reserved_peak": rows,
            "segments_after_marker": new_segments}


def render_streams(rep):
    out = [f"reserved peak: {rep['reserved_peak_bytes']} B ({rep['reserved_peak_bytes'] / 1e9:.3f} GB); "
           "per stream there:"]
    for r in rep["at_reserved_peak"]:
        out.append(f"  stream {r['stream']}: {r['reserved'] / 1e9:.3f} GB reserved, "
                   f"{r['not_live'] / 1e9:.3f} GB not live (first block from {r['first_block_from']})")
    segs = collections.Counter((s["stream"], s["bytes"]) for s in rep["segments_after_marker"])
    out.append("segments taken after the marker (stream, bytes: count):")
    for (st, b), c in sorted(segs.items()):
        out.append(f"  stream {st}, {b} B: {c}")
    return "\n".join(out) + "\n"


def render(rep):
    out = [f"allocated peak after the marker: {rep['peak_bytes']} B ({rep['peak_bytes'] / 1e9:.3f} GB), "
           f"{rep['live_blocks']} live blocks, event {rep['peak_index']} of {rep['events']}",
           "bytes          GB     count  where (innermost DeepSpeed / transformers / harness frame)"]
    for r in rep["groups"]:
        out.append(f"{r['bytes']:>13}  {r['bytes'] / 1e9:6.3f}  {r['count']:>5}  {r['where']}  sizes {r['sizes']}")
    out.append("the events up to the peak (last is the peak):")
    for e in rep["events_before_peak"]:
        out.append(f"  {e['action']:<15} {e['bytes']:>12} B  {e['where']}")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    with open(args.snapshot, "rb") as f:
        snapshot = pickle.load(f)
    rep = analyze(snapshot)
    rep["streams"] = streams(snapshot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
    sys.stdout.write(render(rep))
    sys.stdout.write(render_streams(rep["streams"]))


if __name__ == "__main__":
    main()
