#!/usr/bin/env python3
"""scripts/chaos.py on a real elastic job (docs/cluster.md, "Chaos harness"):

  tests/e2e/chaos_test.py GRADSYNC_BINARY

Two epochs of mlp on Fashion-MNIST, 4 workers under `gradsync launch --elastic --max-restarts`,
faults at a high rate for the first seconds of healthy training (seed 4 draws two kills, then a
stop, at 0.37, 0.48 and 0.62 s of the harness's clock, which runs only while the job is whole, so
the same three on any machine; the next falls at 4.94 s, past the window): the harness must
inject both kinds on real processes, the job must become whole again after each (the
killed worker restarted, the stopped one evicted after --hang-timeout and back when woken), commit the
fault-free run's steps with every sample once, end within a point of its test accuracy, and
count more attempted steps than committed ones only by steps a fault cut. Then (root only) full
disks and a corrupt checkpoint: checkpoints skipped, no step cut, the newest checkpoint intact.
Bad arguments exit 2.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHAOS = os.path.join(ROOT, "scripts", "chaos.py")


def chaos(binary, out, *args):
    return subprocess.run([sys.executable, CHAOS, "--gradsync", binary, "--out", out, *args],
                          capture_output=True, text=True, timeout=240)


def expect(condition, message, run=None):
    if not condition:
        detail = f"\n--- stdout:\n{run.stdout}\n--- stderr:\n{run.stderr}" if run else ""
        sys.exit(f"FAILED: {message}{detail}")


def bad_arguments_exit_2(binary, out):
    for args, reason in ((["--faults", "kill,flood", "--", "--model", "mlp"], "kill, stop, disk"),
                         (["--", "--model", "mlp", "--elastic", "2:4"], "--elastic is the harness's own"),
                         (["--workers", "1"], "at least 2")):
        run = chaos(binary, out, *args)
        expect(run.returncode == 2 and reason in run.stderr,
               f"{args} should exit 2 saying '{reason}'", run)


def faults_cost_nothing_but_time(binary, out):
    # Two epochs (11 s of training or more) for faults in its first 2 s of healthy training: the
    # last one's recovery (a 2 s stop, a 1 s --hang-timeout, the rejoin) ends well before the
    # job does.
    run = chaos(binary, out, "--seed", "4", "--per-minute", "40", "--duration", "2",
                "--stop-seconds", "2", "--", "--model", "mlp", "--epochs", "2", "--hang-timeout",
                "1s", "--quiet")
    expect(run.returncode == 0, f"chaos.py exited {run.returncode}", run)
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    kinds = [f["kind"] for f in report["faults"]]
    expect(kinds == ["kill", "kill", "stop"], f"seed 4's three faults, got {report['faults']}", run)
    for fault in report["faults"]:
        # whole again: a restart or a wake-up, a rendezvous, and a round of 4 training; a stop
        # costs its 2 s (the others evict it after --hang-timeout's 1 s, and go on).
        expect(fault["whole_after"] is not None and fault["whole_after"] < 20,
               f"the job should be whole again within 20 s of {fault}", run)
    reference = report["reference"]
    expect(report["ok"] and "each once" in report["samples"], report["samples"], run)
    expect(report["faulty"]["rounds"][0].startswith("4@0") and len(report["faulty"]["rounds"]) >= 3,
           f"rounds {report['faulty']['rounds']}: each fault should end a round", run)
    expect(report["committed_steps"] == reference["steps"],
           f"{report['committed_steps']} steps committed, the fault-free run's {reference['steps']}", run)
    lost = report["attempted_steps"] - report["committed_steps"]
    expect(0 <= lost <= len(report["faults"]) * 2,
           f"{lost} steps begun and not committed for {len(report['faults'])} faults", run)
    gap = reference["final_test_accuracy"] - report["faulty"]["final_test_accuracy"]
    expect(gap <= 0.01, f"accuracy {gap:.4f} below the fault-free run's", run)
    expect(os.path.getsize(os.path.join(out, "timeline.svg")) > 0, "no timeline.svg", run)
    print(run.stdout, end="")


def storage_faults_cost_only_checkpoints(binary, out):
    # Six epochs (about 23 s of training here, 14 s on a machine 1.7x faster) for faults in the
    # first 8 s of healthy training: seed 9 draws a corrupt checkpoint (injected once the first
    # is written), then a 2 s full disk (the harness draws the kinds from a stream of their own, so this holds
    # whatever the machine's speed). The checkpoints due while the disk is full are skipped,
    # training goes on, and the newest checkpoint at the end is intact (the disk is free again
    # long before the last one).
    if os.geteuid() != 0:
        print("chaos_test: storage faults skipped (the disk fault mounts a tmpfs: root only)")
        return
    run = chaos(binary, out, "--seed", "9", "--per-minute", "40", "--duration", "8",
                "--stop-seconds", "2", "--faults", "disk,corrupt", "--checkpoint-every", "10",
                "--no-reference", "--", "--model", "mlp", "--epochs", "6", "--quiet")
    expect(run.returncode == 0, f"chaos.py exited {run.returncode}", run)
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    kinds = sorted({f["kind"] for f in report["faults"]})
    expect(kinds == ["corrupt", "disk"], f"faults of both kinds, got {report['faults']}", run)
    storage = report["checkpoints"]
    expect(storage["skipped_while_full"] >= 1, "no checkpoint was skipped while the disk was full", run)
    expect(storage["corrupted"] and storage["newest_intact"], f"checkpoints: {storage}", run)
    expect(report["ok"] and "each once" in report["samples"], report["samples"], run)
    expect(report["committed_steps"] == report["attempted_steps"],
           "a storage fault cut a step", run)
    print(run.stdout, end="")


def main():
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="gradsync-chaos-test-") as out:
        bad_arguments_exit_2(binary, out)
        faults_cost_nothing_but_time(binary, out)
        storage_faults_cost_only_checkpoints(binary, out)
    print("chaos_test: passed")


if __name__ == "__main__":
    main()
