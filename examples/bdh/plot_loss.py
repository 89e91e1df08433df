"""Plots bdh train's loss curves: plot_loss.py LOSS_CSV OUT_PNG UNIGRAM_BASELINE."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    csv_path, png_path, unigram = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    steps = [int(r["step"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot(steps, [float(r["train_loss"]) for r in rows], marker=".", label="train")
    ax.plot(steps, [float(r["validation_loss"]) for r in rows], marker=".", label="validation")
    ax.axhline(unigram, color="gray", linestyle="--", label=f"unigram baseline ({unigram:.3f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/byte)")
    ax.set_title("BDH with rho-attention: byte-level language modelling")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main()
