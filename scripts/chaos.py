#!/usr/bin/env python3
"""Chaos harness for elastic training (docs/cluster.md, "Chaos harness").

Runs one `gradsync train --elastic` job under `gradsync launch --max-restarts`, injects faults
on its real worker processes at Poisson-distributed times, and reports what they cost against
the same job run without faults:

  scripts/chaos.py [options] -- TRAIN_FLAGS...
  scripts/chaos.py --per-minute 6 --faults kill,stop --out /tmp/chaos -- \\
      --model cnn --epochs 2 --hang-timeout 2s

Faults (--faults, any of):
  kill   SIGKILL a random worker; the launcher starts it again (--max-restarts) and it rejoins.
  stop   SIGSTOP a random worker for --stop-seconds, then SIGCONT: the others evict it after
         the job's --hang-timeout (give one shorter than --stop-seconds) and it rejoins when
         woken.
  disk   fills the disk under the job's checkpoints for --stop-seconds (a tmpfs of --disk-mb the
         harness mounts: root only): a periodic checkpoint due meanwhile is skipped, training
         goes on.
  corrupt  flips one byte of the newest checkpoint file.
With disk or corrupt, the harness gives the job --checkpoint-dir (OUT/RUN/disk/checkpoints) and
--checkpoint-every (20), in the fault-free run too, and reports the checkpoints skipped while the
disk was full and each checkpoint file left, verified; the newest must be intact (it is the one
a --resume reads).

The Poisson clock runs only while the job is whole (its newest round trains with MAX workers,
none stopped, the disk free): --per-minute counts faults per minute of healthy training, and a
fault is injected only then, so every fault hits a running job, none can push it below MIN, and
a seed's faults fall at the same points of training on any machine (its start-up and recoveries
take no clock time).

Report (printed, and OUT/report.json): the faults with the time each took until the job was
whole again (null when the job ended first); committed steps (the job's) against attempted steps (every (round, step) any worker
began: a step cut by a fault is begun again by the next round), the step efficiency
committed/attempted; training time and steps per second against the fault-free run, and the
time lost per fault; final test accuracy and training loss against it; whether every sample of
every epoch was trained exactly once (from --record-samples). OUT/timeline.svg plots committed
steps per second over time with the faults marked; OUT/faulty and OUT/reference hold each run's
metrics, sample logs and output.

Exit code: 0 when the faulty job finished and every sample was used once; 1 otherwise; 2 for bad
arguments.
"""
import argparse
import collections
import glob
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time

from chaos_storage import CheckpointStorage

POLL_SECONDS = 0.05


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], usage="%(prog)s [options] -- TRAIN_FLAGS...")
    parser.add_argument("--gradsync", default=os.environ.get("GRADSYNC", "build/apps/gradsync/gradsync"))
    parser.add_argument("--workers", type=int, default=4, help="MAX: processes launched (4)")
    parser.add_argument("--min-workers", type=int, default=None, help="MIN (default MAX - 1)")
    parser.add_argument("--max-restarts", type=int, default=1000)
    parser.add_argument("--faults", default="kill,stop",
                        help="comma-separated: kill, stop, disk, corrupt")
    parser.add_argument("--per-minute", type=float, default=1.0,
                        help="mean faults per minute of healthy training")
    parser.add_argument("--stop-seconds", type=float, default=6.0,
                        help="how long a stop, or a full disk, lasts")
    parser.add_argument("--disk-mb", type=int, default=256, help="the checkpoints' tmpfs (disk)")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="(disk, corrupt)")
    parser.add_argument("--duration", type=float, default=None,
                        help="inject faults only in the first DURATION seconds of healthy "
                             "training (the Poisson clock's)")
    parser.add_argument("--seed", type=int, default=0, help="of the fault draws")
    parser.add_argument("--out", default="/tmp/gradsync-chaos")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the fault-free run (no comparison in the report)")
    parser.add_argument("train_flags", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.train_flags[:1] == ["--"]:
        args.train_flags = args.train_flags[1:]
    args.faults = [f for f in args.faults.split(",") if f]
    unknown = set(args.faults) - {"kill", "stop", "disk", "corrupt"}
    if unknown or not args.faults:
        parser.error("--faults takes kill, stop, disk and corrupt, not "
                     f"{','.join(sorted(unknown)) or 'nothing'}")
    args.storage = bool({"disk", "corrupt"} & set(args.faults))
    if "disk" in args.faults and os.geteuid() != 0:
        parser.error("the disk fault mounts a tmpfs: run as root")
    if args.storage:
        for flag in ("--checkpoint-dir", "--checkpoint-every"):
            if flag in args.train_flags:
                parser.error(f"{flag} is the harness's own with disk or corrupt faults")
    if args.workers < 2:
        parser.error("--workers must be at least 2")
    if args.min_workers is None:
        args.min_workers = args.workers - 1
    if not 1 <= args.min_workers <= args.workers:
        parser.error(f"--min-workers must be in 1..{args.workers}")
    if args.per_minute <= 0:
        parser.error("--per-minute must be positive")
    for flag in ("--elastic", "--record-samples", "--metrics", "--workers"):
        if flag in args.train_flags:
            parser.error(f"{flag} is the harness's own: do not pass it in TRAIN_FLAGS")
    if not os.access(args.gradsync, os.X_OK):
        parser.error(f"no gradsync executable at {args.gradsync} (--gradsync or GRADSYNC)")
    return args


class SampleWatcher:
    """Follows the sample logs of a running job (one file per worker process, written one line
    per step before the step's gradients leave: src/data/sample_log.h) and records when each
    (round, step) first appeared, and each process's pid, slot and latest round."""

    def __init__(self, directory):
        self.directory = directory
        self.offsets = {}
        self.first_seen = {}  # (round, step) -> seconds since start
        self.lines = collections.defaultdict(dict)  # (round, step) -> rank -> (epoch, indices)
        self.processes = {}  # path -> {"slot", "pid", "round", "size"}

    def poll(self, now):
        for path in glob.glob(os.path.join(self.directory, "worker-*.txt")):
            with open(path) as f:
                f.seek(self.offsets.get(path, 0))
                text = f.read()
            complete = text[:text.rfind("\n") + 1]
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            for line in complete.splitlines():
                self._take(path, line, now)

    def _take(self, path, line, now):
        process = self.processes.setdefault(
            path, {"slot": int(re.search(r"worker-(\d+)-", path).group(1)), "pid": None,
                   "round": -1, "size": 0})
        if line.startswith("#"):
            found = re.search(r"pid (\d+)", line)
            process["pid"] = int(found.group(1)) if found else None
            return
        values = list(map(int, line.split()))
        round_, step, epoch, rank, size = values[:5]
        self.first_seen.setdefault((round_, step), now)
        self.lines[(round_, step)][rank] = (epoch, values[5:])
        process["round"], process["size"] = round_, size

    def newest_round(self):
        return max((p["round"] for p in self.processes.values()), default=-1)


def process_state(pid):
    """'R', 'S', 'T' (stopped), 'Z'... or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def live_workers(watcher):
    """The running (not stopped, not dead) worker process of each slot, by its newest log."""
    newest = {}
    for path, process in watcher.processes.items():
        restart = int(re.search(r"worker-\d+-(\d+)\.txt$", path).group(1))
        if process["pid"] and restart >= newest.get(process["slot"], (-1, None))[0]:
            newest[process["slot"]] = (restart, process)
    return {slot: p for slot, (_, p) in newest.items()
            if process_state(p["pid"]) not in (None, "T", "t", "Z", "X")}


def job_is_whole(watcher, workers):
    """MAX running workers, all training in the newest round, which has MAX members."""
    live = live_workers(watcher)
    newest = watcher.newest_round()
    return (len(live) == workers and newest >= 0 and
            all(p["round"] == newest and p["size"] == workers for p in live.values()))


def run_job(args, directory, inject):
    """Runs the job into DIRECTORY; with INJECT, injects faults. Returns (exit code, watcher,
    faults, what the storage faults left or None); times are seconds since the launch."""
    os.makedirs(directory, exist_ok=True)
    for old in glob.glob(os.path.join(directory, "samples", "*")):
        os.remove(old)
    storage = None
    flags = list(args.train_flags)
    if args.storage:
        storage = CheckpointStorage(os.path.join(directory, "disk"), args.disk_mb,
                                    mount="disk" in args.faults)
        flags += ["--checkpoint-dir", storage.directory,
                  "--checkpoint-every", str(args.checkpoint_every)]
    try:
        code, watcher, faults = watch_job(args, directory, flags, inject, storage)
        left = storage.report(os.path.join(directory, "err")) if storage else None
    finally:
        if storage:
            storage.close()
    return code, watcher, faults, left


def watch_job(args, directory, flags, inject, storage):
    """run_job's loop: launches the job with FLAGS and, with INJECT, injects faults while it
    runs; returns (exit code, watcher, faults)."""
    command = [args.gradsync, "launch", "-n", str(args.workers), "--elastic",
               "--max-restarts", str(args.max_restarts), "--", args.gradsync, "train",
               "--elastic", f"{args.min_workers}:{args.workers}",
               "--record-samples", os.path.join(directory, "samples"),
               "--metrics", os.path.join(directory, "metrics.json")] + flags
    watcher = SampleWatcher(os.path.join(directory, "samples"))
    # One stream per purpose, so that the kinds' sequence is the seed's whatever the timing
    # (a machine's speed decides how many faults fall in a window, and when a checkpoint exists).
    times = random.Random(f"{args.seed}:times")
    kinds = random.Random(f"{args.seed}:kinds")
    targets = random.Random(f"{args.seed}:targets")
    kind = None  # the next fault's, drawn once and kept until injected
    faults = []
    start = last_poll = time.monotonic()
    # The Poisson clock (and --duration's window) runs only while the job is whole and calm:
    # the faults' times are then seconds of healthy training, the same on any machine, however
    # long its start-up or its recoveries take (a wall clock let a slow machine's recoveries eat
    # the window, and a seed's faults differ from machine to machine).
    healthy = 0.0
    due = times.expovariate(args.per_minute / 60.0)
    stopped = None  # (pid, time to continue it)
    full_until = None  # when to free the filled disk
    with open(os.path.join(directory, "out"), "w") as out, \
            open(os.path.join(directory, "err"), "w") as err:
        job = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
        try:
            while job.poll() is None:
                time.sleep(POLL_SECONDS)
                now = time.monotonic()
                watcher.poll(now - start)
                if stopped and now >= stopped[1]:
                    wake(stopped[0])
                    stopped = None
                if full_until and now >= full_until:
                    storage.release()
                    full_until = None
                calm = not stopped and not full_until
                whole = job_is_whole(watcher, args.workers)
                if faults and faults[-1].get("whole_after") is None and whole and calm:
                    faults[-1]["whole_after"] = round(now - start - faults[-1]["at"], 3)
                if whole and calm:
                    healthy += now - last_poll
                last_poll = now
                in_window = args.duration is None or healthy < args.duration
                if inject and in_window and healthy >= due and whole and calm:
                    kind = kind or kinds.choice(args.faults)
                    fault = inject_fault(kind, targets, watcher, storage, now - start)
                    if fault:  # else a corrupt fault waits for the first checkpoint
                        faults.append(fault)
                        kind = None
                        if fault["kind"] == "stop":
                            stopped = (fault["pid"], now + args.stop_seconds)
                        if fault["kind"] == "disk":
                            full_until = now + args.stop_seconds
                        due = max(due, healthy) + times.expovariate(args.per_minute / 60.0)
        except BaseException:
            os.killpg(job.pid, signal.SIGKILL)
            raise
        finally:
            if stopped:
                wake(stopped[0])
            if full_until:
                storage.release()
    watcher.poll(time.monotonic() - start)
    return job.returncode, watcher, faults


def wake(pid):
    if process_state(pid):
        os.kill(pid, signal.SIGCONT)


def inject_fault(kind, targets, watcher, storage, at):
    """Injects a fault of `kind` on a random target; its record, or None (a corrupt fault with no
    checkpoint written yet)."""
    fault = {"kind": kind, "at": round(at, 3), "whole_after": None}
    if kind == "disk":
        fault["bytes"] = storage.fill()
        print(f"  {at:7.1f} s  disk full ({fault['bytes'] / 1e6:.0f} MB taken)", flush=True)
        return fault
    if kind == "corrupt":
        corrupted = storage.corrupt_newest(targets)
        if corrupted is None:
            return None
        fault["file"], fault["offset"] = corrupted
        print(f"  {at:7.1f} s  corrupt {corrupted[0]} at byte {corrupted[1]}", flush=True)
        return fault
    slot, process = targets.choice(sorted(live_workers(watcher).items()))
    os.kill(process["pid"], signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
    print(f"  {at:7.1f} s  {kind} worker {slot} (pid {process['pid']}, round {process['round']})",
          flush=True)
    fault.update(slot=slot, pid=process["pid"], round=process["round"])
    return fault


def committed_steps(metrics):
    """(round, step) of every step the job committed: round r's steps run from its first_step to
    the next round's (docs/metrics.md)."""
    rounds = metrics["elastic"]["rounds"]
    steps = metrics["summary"]["steps"]
    committed, r = [], 0
    for step in range(steps):
        while r + 1 < len(rounds) and rounds[r + 1]["first_step"] <= step:
            r += 1
        committed.append((rounds[r]["round"], step, rounds[r]["workers"]))
    return committed


def samples_once(committed, watcher):
    """Every committed step has one line from each rank of its round, and every sample of every
    epoch it reached was trained exactly once. Returns (ok, reason)."""
    uses = collections.Counter()
    for round_, step, workers in committed:
        ranks = watcher.lines.get((round_, step), {})
        if sorted(ranks) != list(range(workers)):
            return False, f"step {step} of round {round_}: lines from ranks {sorted(ranks)}"
        for epoch, indices in ranks.values():
            uses.update((epoch, i) for i in indices)
    repeated = [key for key, n in uses.items() if n != 1]
    if repeated:
        return False, f"sample {repeated[0][1]} of epoch {repeated[0][0] + 1} trained {uses[repeated[0]]} times"
    by_epoch = collections.Counter(epoch for epoch, _ in uses)
    complete = max(by_epoch.values(), default=0)
    short = [e for e, n in by_epoch.items() if n != complete and e != max(by_epoch)]
    if short:
        return False, f"epoch {short[0] + 1} trained {by_epoch[short[0]]} of {complete} samples"
    return True, f"{sum(uses.values())} samples, each once"


def summarize(metrics, watcher):
    committed = committed_steps(metrics)
    times = sorted(watcher.first_seen[(r, s)] for r, s, _ in committed if (r, s) in watcher.first_seen)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    epochs = metrics.get("epochs") or [{}]
    return {"committed": committed, "times": times, "steps": len(committed),
            "span_seconds": round(span, 3),
            "steps_per_second": round((len(times) - 1) / span, 3) if span else 0.0,
            "final_test_accuracy": metrics["summary"].get("final_test_accuracy"),
            "final_held_out_loss": metrics["summary"].get("final_held_out_loss"),
            "final_train_loss": epochs[-1].get("train_loss"),
            "rounds": [f"{x['workers']}@{x['first_step']}" for x in metrics["elastic"]["rounds"]]}


def timeline_svg(path, times, faults, span_end):
    """Committed steps per second (2 s windows) over time, faults as vertical lines."""
    width, height, pad, window = 720, 240, 40, 2.0
    buckets = collections.Counter(int(t // window) for t in times)
    top = max(buckets.values(), default=1) / window
    end = max(span_end, 1.0)

    def x(t):
        return pad + (width - 2 * pad) * t / end

    def y(rate):
        return height - pad - (height - 2 * pad) * rate / top
    points = " ".join(f"{x((b + 0.5) * window):.1f},{y(buckets.get(b, 0) / window):.1f}"
                      for b in range(int(end // window) + 1))
    colours = {"kill": "#c0392b", "stop": "#e67e22", "disk": "#2980b9", "corrupt": "#8e44ad"}

    def what(f):
        return f"{f['kind']} worker {f['slot']}" if "slot" in f else f.get("file", f["kind"])
    marks = "".join(
        f'<line x1="{x(f["at"]):.1f}" y1="{pad}" x2="{x(f["at"]):.1f}" y2="{height - pad}" '
        f'stroke="{colours[f["kind"]]}" stroke-dasharray="4 3"><title>{f["kind"]}: {what(f)} '
        f'at {f["at"]} s</title></line>' for f in faults)
    with open(path, "w") as out:
        out.write(
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" font-size="11">'
            f'<text x="{pad}" y="20">committed steps/s ({window:g} s windows); red: kill, '
            f'orange: stop, blue: disk full, purple: corrupt checkpoint</text>'
            f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>'
            f'<text x="{pad - 4}" y="{pad + 4}" text-anchor="end">{top:.0f}</text>'
            f'<text x="{width - pad}" y="{height - pad + 16}" text-anchor="end">{end:.0f} s</text>'
            f'{marks}<polyline fill="none" stroke="#2c3e50" points="{points}"/></svg>\n')


def report(args, code, watcher, faults, reference, storage):
    metrics_path = os.path.join(args.out, "faulty", "metrics.json")
    if code != 0 or not os.path.exists(metrics_path):
        print(f"chaos: the faulty job failed (exit {code}); its output: {args.out}/faulty/err",
              file=sys.stderr)
        return {"ok": False, "exit_code": code, "faults": faults}
    with open(metrics_path) as f:
        faulty = summarize(json.load(f), watcher)
    ok, why = samples_once(faulty["committed"], watcher)
    if storage is not None and not storage["newest_intact"]:
        ok = False
    attempted = len(watcher.first_seen)
    result = {
        "ok": ok, "samples": why, "faults": faults, "checkpoints": storage,
        "committed_steps": len(faulty["committed"]), "attempted_steps": attempted,
        "step_efficiency": round(len(faulty["committed"]) / attempted, 4) if attempted else None,
        "faulty": {k: v for k, v in faulty.items() if k not in ("committed", "times")},
    }
    if reference:
        result["reference"] = {k: v for k, v in reference.items() if k not in ("committed", "times")}
        if reference["span_seconds"] and faulty["span_seconds"]:
            result["time_efficiency"] = round(reference["span_seconds"] / faulty["span_seconds"], 4)
            if faults:
                result["seconds_lost_per_fault"] = round(
                    (faulty["span_seconds"] - reference["span_seconds"]) / len(faults), 3)
    timeline_svg(os.path.join(args.out, "timeline.svg"), faulty["times"], faults,
                 faulty["times"][-1] if faulty["times"] else 1.0)
    return result


def print_report(result):
    faults = result["faults"]
    kinds = collections.Counter(f["kind"] for f in faults)
    whole = [f["whole_after"] for f in faults if f["whole_after"] is not None]
    print(f"faults: {len(faults)} ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items())) or 'none'})"
          + (f"; whole again after median {statistics.median(whole):.2f} s, max {max(whole):.2f} s"
             if whole else ""))
    if "committed_steps" not in result:
        return
    faulty = result["faulty"]
    print(f"steps: {result['committed_steps']} committed of {result['attempted_steps']} attempted"
          f" (step efficiency {100 * result['step_efficiency']:.1f}%); rounds {' '.join(faulty['rounds'])}")
    print(f"samples: {result['samples']}")
    storage = result.get("checkpoints")
    if storage is not None:
        left = ", ".join(f"step {c['step']} {c['problem'] or 'intact'}" for c in storage["left"])
        print(f"checkpoints: {storage['skipped_while_full']} skipped while the disk was full; "
              f"corrupted {', '.join(storage['corrupted']) or 'none'}; left: {left or 'none'}; "
              f"the newest {'intact' if storage['newest_intact'] else 'NOT intact'}")
    reference = result.get("reference")
    line = f"training: {faulty['span_seconds']:.1f} s, {faulty['steps_per_second']:.2f} steps/s"
    if reference:
        line += (f" (fault-free: {reference['span_seconds']:.1f} s, {reference['steps_per_second']:.2f}"
                 f" steps/s; time efficiency {100 * result.get('time_efficiency', 0):.1f}%")
        if "seconds_lost_per_fault" in result:
            line += f", {result['seconds_lost_per_fault']:.2f} s lost per fault"
        line += ")"
    print(line)

    def percent(value):
        return f"{100 * value:.2f}%" if value is not None else "?"
    held_out = faulty.get("final_held_out_loss")
    if held_out is not None:  # a language model: its held-out loss (accuracy is null)
        line = f"final held-out loss {held_out:.4f} nats/token, train loss {faulty['final_train_loss']}"
        if reference and reference.get("final_held_out_loss"):
            theirs = reference["final_held_out_loss"]
            line += (f" (fault-free: {theirs:.4f}, {100 * (held_out / theirs - 1):+.2f}%;"
                     f" {reference['final_train_loss']})")
        print(line)
        return
    line = f"final test accuracy {percent(faulty['final_test_accuracy'])}, train loss {faulty['final_train_loss']}"
    if reference:
        line += (f" (fault-free: {percent(reference['final_test_accuracy'])},"
                 f" {reference['final_train_loss']})")
    print(line)


def main(argv):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    reference = None
    if not args.no_reference:
        print("chaos: the fault-free run", flush=True)
        code, watcher, _, _ = run_job(args, os.path.join(args.out, "reference"), inject=False)
        if code != 0:
            print(f"chaos: the fault-free run failed (exit {code}): {args.out}/reference/err",
                  file=sys.stderr)
            return 1
        with open(os.path.join(args.out, "reference", "metrics.json")) as f:
            reference = summarize(json.load(f), watcher)
    print(f"chaos: the run with faults ({','.join(args.faults)}, {args.per_minute:g} a minute)",
          flush=True)
    code, watcher, faults, storage = run_job(args, os.path.join(args.out, "faulty"), inject=True)
    result = report(args, code, watcher, faults, reference, storage)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(result, f, indent=2)
    print_report(result)
    print(f"report: {args.out}/report.json, plot: {args.out}/timeline.svg")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
