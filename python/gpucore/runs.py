"""`gpucore runs [DIR]`: the runs under a folder as a table (name, status, epochs, best metric, device, training
time), read from their training_stats.json: a look at many runs without an experiment tracker."""
from __future__ import annotations

import json
import os
from typing import Dict, List

from .errors import ConfigError
from .run_files import STATS
from .run_history import epochs_seconds

COLUMNS = ("name", "status", "epochs", "best", "device", "time")


def find_runs(folder: str) -> List[Dict[str, str]]:
    """A row per run directory (a folder with training_stats.json) in `folder` (config key run_dir: the runs are its
    subfolders), in name order; `folder` itself when it is a run directory."""
    if not os.path.isdir(folder):
        raise ConfigError(f"'{folder}' is not a folder; name the folder that holds the run directories (config key "
                          "run_dir, default runs)")
    if os.path.isfile(os.path.join(folder, STATS)):
        return [run_row(folder, os.path.basename(os.path.abspath(folder)))]
    names = sorted(name for name in os.listdir(folder) if os.path.isfile(os.path.join(folder, name, STATS)))
    return [run_row(os.path.join(folder, name), name) for name in names]


def run_row(path: str, name: str) -> Dict[str, str]:
    """The table's row of the run directory `path`."""
    try:
        with open(os.path.join(path, STATS), encoding="utf-8") as handle:
            stats = json.load(handle)
    except (OSError, ValueError) as exc:
        return dict(dict.fromkeys(COLUMNS, "-"), name=name, status=f"unreadable {STATS} ({type(exc).__name__})")
    epochs = stats.get("epochs") or []
    best = stats.get("best") or {}
    shown_best = (f"{best['monitor']} {best['metric']:.4f} (epoch {best['epoch']})" if best.get("metric") is not None
                  else "-")
    return {"name": name, "status": stats.get("status", "-"),
            "epochs": f"{len(epochs)}/{(stats.get('config') or {}).get('epochs', '?')}", "best": shown_best,
            "device": stats.get("device", "-"), "time": duration(trained_seconds(stats))}


def trained_seconds(stats: dict) -> float:
    """The time a run trained: its epochs' epoch_time_s plus, for a run interrupted mid-epoch, the time of the
    epoch cut short (seconds.interrupted_epoch; files written before it was recorded lack it)."""
    finished = epochs_seconds(stats.get("epochs") or [])
    return finished + ((stats.get("seconds") or {}).get("interrupted_epoch") or 0)


def duration(seconds: float) -> str:
    """12s, 4m 05s, 2h 03m."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def format_table(rows: List[Dict[str, str]]) -> str:
    """The rows under a header, each column as wide as its widest cell."""
    lines = [dict(zip(COLUMNS, COLUMNS)), *rows]
    widths = {column: max(len(line[column]) for line in lines) for column in COLUMNS}
    return "\n".join("  ".join(line[column].ljust(widths[column]) for column in COLUMNS).rstrip() for line in lines)
