"""Training curves: loss and accuracy by block position, and the held-out TPF at checkpoints."""

from __future__ import annotations

from pathlib import Path


def plot_history(
    history: list[dict],
    path: str | Path,
    window: int = 10,
    tpf_label: str = "held-out spec TPF",
    first_slot: int = 0,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    D = len(history[0]["slot_acc"])

    def smooth(xs):
        return [
            sum(xs[max(0, i - window + 1) : i + 1]) / len(xs[max(0, i - window + 1) : i + 1])
            for i in range(len(xs))
        ]

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for j in range(D):
        axes[0].plot(steps, smooth([h["slot_loss"][j] for h in history]), label=f"slot {j + first_slot}")
        axes[1].plot(steps, smooth([h["slot_acc"][j] for h in history]), label=f"slot {j + first_slot}")
    axes[0].set_title(f"block loss by position ({window}-step mean)")
    axes[1].set_title("argmax accuracy by position")
    evals = [h for h in history if h.get("heldout_tpf") is not None]
    axes[2].plot([h["step"] for h in evals], [h["heldout_tpf"] for h in evals], marker="o")
    axes[2].set_title(f"{tpf_label} (greedy, lossless)")
    for ax in axes:
        ax.set_xlabel("optimizer step")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
