#!/usr/bin/env python3
"""Draws the bytes arriving on device B over time for a new large file (issue 48) from the
JSON `ubiquity-sync-bench --link home|office` prints: Ubiquity streaming, Ubiquity store and
forward, and Syncthing, on the same shaped link in the same run.

    python3 contrib/bench/plot-arrival.py BENCH.json OUT.png   (pip install matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(figures, *path):
    for key in path:
        if not isinstance(figures, dict) or key not in figures:
            return None
        figures = figures[key]
    return figures


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as handle:
        figures = json.load(handle)["link"]
    link = figures["link"]
    title = "A new large file reaching device B: {:g} Mbit/s up, {:g} down, {:g} ms each way".format(
        link["up"]["bitsPerSecond"] / 1e6, link["down"]["bitsPerSecond"] / 1e6, link["up"]["delaySeconds"] * 1000)
    lines = [
        ("Ubiquity, streaming through the server", series(figures, "ubiquity", "large", "newFile", "arrival"), "tab:blue"),
        ("Ubiquity, store and forward", series(figures, "ubiquityStoreAndForward", "newFile", "arrival"), "tab:orange"),
        ("Syncthing, device to device", series(figures, "syncthing", "large", "newFile", "arrival"), "tab:green"),
    ]
    plt.figure(figsize=(9, 5))
    for label, arrival, color in lines:
        if arrival:
            plt.plot(arrival["seconds"], arrival["mib"], label=label, color=color)
    plt.axvline(figures["oneLegSeconds"], color="gray", linestyle="--", label="one leg (size ÷ slower bandwidth)")
    plt.xlabel("seconds since the file was whole in A's folder")
    plt.ylabel("MiB on B's link (both directions)")
    plt.title(title)
    plt.legend(loc="lower right")
    plt.grid(alpha=0.3)
    plt.tight_layout()
    plt.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
