"""What every benchmark here shares: the device label, synchronisation, the ratio table and the JSON report."""
import datetime
import json
import platform

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_label(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"


def report(title: str, unit: str, rates: dict, reference: str, facts: dict, json_path=None) -> dict:
    """Prints `rates` (higher is better) with `reference`'s ratio to each, writes the JSON, returns it."""
    width = max(len(name) for name in rates) + 2
    print(title)
    print(f"{'implementation':<{width}}{unit:>17}   ratio of '{reference}' to this")
    for name, value in rates.items():
        print(f"{name:<{width}}{value:>17.1f}{rates[reference] / value:>12.2f}x")
    result = dict(facts, date=datetime.date.today().isoformat(), torch=torch.__version__,
                  python=platform.python_version(), per_second=rates,
                  ratio={name: rates[reference] / value for name, value in rates.items()})
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(result, handle, indent=2)
    return result
