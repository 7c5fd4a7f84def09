"""Rewrites the README's configuration-key table from gpucore.config.KEYS (run with an installed gpucore)."""
import json

from gpucore.config import KEYS
lines = open("README.md").read().split("\n")
start = lines.index("| key | default | meaning |") + 2
end = start
while lines[end].startswith("| `"):
    end += 1
def fmt(v):
    if v is None: return "`null`"
    if isinstance(v, bool): return "`true`" if v else "`false`"
    if isinstance(v, str): return f"`{v}`" if v else '`""`'
    if isinstance(v, (dict, list)): return f"`{json.dumps(v)}`"
    return f"`{v}`"
rows = []
for k in KEYS:
    listed = not k.choices or all(choice in k.doc for choice in k.choices)
    doc = k.doc if listed else f"{k.doc} ({', '.join(k.choices)})"
    rows.append(f"| `{k.name}` | {fmt(k.default)} | {doc} |")
lines[start:end] = rows
open("README.md", "w").write("\n".join(lines))
