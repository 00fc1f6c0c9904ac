#!/usr/bin/env python3
"""Wavelet's headline shapes in `gradsync simulate --waves` (docs/simulator.md, "Wavelet";
docs/performance.md, "Wavelet in the simulator"). Every figure is a prediction.

  Model parallel: the built-in resnet50 and vgg19 profiles in k = 1..8 balanced partitions on
    k devices, naive model parallelism against k waves in the same placement (a pipeline of k
    mini-batches) and in rotated placement (Wavelet), with hops of --hop per device pair.
    Published: "up to 6.7x faster than commonly used parallelism techniques" (8 GPUs).
  Hops at k = 8: 0, 1 ms and 4 ms per transfer, over a link per device pair or one shared link.
  Data parallel: 2 tick-tock waves of B against one wave of 2B (peak device memory), and on a
    device of --device-memory the largest batch of each and its throughput, for saturation
    batches 0 (any batch fills the device) and 128; then with a least offset between the
    waves' forwards of 0 (the gates alone), 0.7, 0.8 and 0.9 of an iteration (saturation 128).

  scripts/sim_wavelet.py [--build build] [--hop 0] [--device-memory 8GiB] [--out results/sim-wavelet]
Writes OUT/wavelet.json and prints Markdown tables.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODELS = ["resnet50", "vgg19"]


def simulate(gradsync, flags):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        done = subprocess.run([gradsync, "simulate", *flags, "--json", out.name],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"gradsync simulate {' '.join(flags)} failed: {done.stderr}")
        return json.load(open(out.name))


def model_parallel(gradsync, hop):
    rows = []
    for model in MODELS:
        for k in range(1, 9):
            doc = simulate(gradsync, ["--model-profile", model, "--pipeline", str(k),
                                      "--waves", str(k), "--hop", hop])
            rows.append({"model": model, "k": k, "layers": doc["partition_layers"],
                         "naive_ms": doc["naive"]["ms_per_mini_batch"],
                         "same": doc["same_placement"]["speed_up"],
                         "rotated": doc["rotated"]["speed_up"],
                         "rotated_utilisation": doc["rotated"]["utilisation"]})
    print(f"\n| profile | k | layers per partition | naive ms per mini-batch | k waves, same "
          f"placement | k waves, rotated (Wavelet) | rotated utilisation |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['k']} | {','.join(map(str, r['layers']))} | "
              f"{r['naive_ms']:.2f} | {r['same']:.2f}x | {r['rotated']:.2f}x | "
              f"{100 * r['rotated_utilisation']:.1f}% |")
    return rows


def hops(gradsync):
    rows = []
    for model in MODELS:
        for hop in ["0", "1ms", "4ms"]:
            for shared in [False, True]:
                if hop == "0" and shared:
                    continue
                doc = simulate(gradsync, ["--model-profile", model, "--pipeline", "8",
                                          "--waves", "8", "--hop", hop]
                               + (["--shared-link"] if shared else []))
                rows.append({"model": model, "hop": hop, "shared_link": shared,
                             "naive_ms": doc["naive"]["ms_per_mini_batch"],
                             "same": doc["same_placement"]["speed_up"],
                             "rotated": doc["rotated"]["speed_up"]})
    print("\n| profile (k = 8) | hop | links | naive ms per mini-batch | 8 waves, same placement | "
          "8 waves, rotated |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['hop']} | {'one shared' if r['shared_link'] else 'per pair'} | "
              f"{r['naive_ms']:.2f} | {r['same']:.2f}x | {r['rotated']:.2f}x |")
    return rows


def data_parallel(gradsync, memory):
    rows = []
    for model in MODELS:
        for saturation in [0, 128]:
            doc = simulate(gradsync, ["--model-profile", model, "--waves", "2",
                                      "--device-memory", memory,
                                      "--saturation-batch", str(saturation)])
            cap = doc["capacity"]
            rows.append({"model": model, "saturation": saturation,
                         "one_peak": doc["one_wave"]["peak_bytes"],
                         "waves_peak": doc["waves"]["peak_bytes"],
                         "static": doc["one_wave"]["static_bytes"],
                         "one_fit": cap["one_wave"]["batch_per_wave"],
                         "waves_fit": cap["waves"]["batch_per_wave"],
                         "one_rate": cap["one_wave"]["samples_per_s"],
                         "waves_rate": cap["waves"]["samples_per_s"]})
    print(f"\n| profile | saturation batch | peak, one wave of 64 (GB) | peak, 2 waves of 32 (GB) | "
          f"ratio | {memory}: one wave fits | 2 waves fit | samples/s, one wave | 2 waves | "
          f"2 waves / one |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['saturation']} | {r['one_peak'] / 1e9:.3f} | "
              f"{r['waves_peak'] / 1e9:.3f} | {r['waves_peak'] / r['one_peak']:.3f} | "
              f"{r['one_fit']} | 2 x {r['waves_fit']} | {r['one_rate']:.1f} | "
              f"{r['waves_rate']:.1f} | {r['waves_rate'] / r['one_rate']:.2f}x |")
    return rows


def offsets(gradsync, memory):
    rows = []
    for model in MODELS:
        for offset in ["0", "0.7", "0.8", "0.9"]:
            doc = simulate(gradsync, ["--model-profile", model, "--waves", "2",
                                      "--device-memory", memory, "--saturation-batch", "128",
                                      "--wave-offset", offset])
            cap = doc["capacity"]
            rows.append({"model": model, "offset": offset,
                         "ratio": doc["waves"]["peak_bytes"] / doc["one_wave"]["peak_bytes"],
                         "waves_fit": cap["waves"]["batch_per_wave"],
                         "one_fit": cap["one_wave"]["batch_per_wave"],
                         "gain": cap["waves"]["samples_per_s"] / cap["one_wave"]["samples_per_s"]})
    print(f"\n| profile (saturation 128) | --wave-offset | peak, 2 waves of 32 / one of 64 | "
          f"{memory}: one wave fits | 2 waves fit | 2 waves / one, samples/s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['offset']} | {r['ratio']:.3f} | {r['one_fit']} | "
              f"2 x {r['waves_fit']} | {r['gain']:.2f}x |")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--hop", default="0")
    parser.add_argument("--device-memory", default="8GiB")
    parser.add_argument("--out", default="results/sim-wavelet")
    args = parser.parse_args()
    gradsync = os.path.join(args.build, "apps", "gradsync", "gradsync")
    results = {"hop": args.hop, "device_memory": args.device_memory,
               "model_parallel": model_parallel(gradsync, args.hop),
               "hops": hops(gradsync),
               "data_parallel": data_parallel(gradsync, args.device_memory),
               "offsets": offsets(gradsync, args.device_memory)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "wavelet.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
