"""A flame graph from `perf script` output, with no tool but Python.

    perf record -e cpu-clock -F 997 --call-graph dwarf -p PID -o perf.data -- sleep 10
    perf script -i perf.data | python3 -m loadtest.lib.flame TITLE OUT.svg [OUT.folded]

Stacks are folded (root first, one line per distinct stack with its sample count), names
shortened (Rust's hash suffix and generic arguments dropped), and drawn as a flame graph: a
box's width is its share of the samples; hovering shows the name and the share. The folded
file is what inferno or Brendan Gregg's flamegraph.pl would also take.
"""

import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .common import svg as draw

HASH = re.compile(r"::h[0-9a-f]{16}$")


def short(name: str) -> str:
    name = HASH.sub("", name)
    # Generic arguments and closures' decorations make names long without telling more.
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<…>")
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out).replace("{{closure}}", "{closure}")


def fold(lines: Iterable[str]) -> Counter[str]:
    stacks, frames, comm = Counter(), [], None
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if frames or comm:
                stacks[";".join([comm or "?"] + [short(f) for f in reversed(frames)])] += 1
            frames, comm = [], None
        elif line[0] not in " \t":
            comm = line.split()[0]
        else:
            parts = line.strip().split(" ", 1)
            if len(parts) == 2:
                sym = re.sub(r"\s+\(.*\)$", "", parts[1])
                sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
                frames.append(sym)
    if frames or comm:
        stacks[";".join([comm or "?"] + [short(f) for f in reversed(frames)])] += 1
    return stacks


def tree(stacks: Counter[str]) -> dict[str, Any]:
    root = {"n": 0, "kids": {}}
    for stack, n in stacks.items():
        node = root
        node["n"] += n
        for frame in stack.split(";"):
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += n
    return root


def colour(name: str) -> str:
    h = sum(map(ord, name)) % 60
    if name.startswith(("seckill", "<seckill")):
        return f"rgb(230,{90 + h},50)"
    if "sqlx" in name or "tokio" in name or "hyper" in name:
        return f"rgb(220,{140 + h},60)"
    return f"rgb(200,{170 + h // 2},{90 + h})"


def svg(root: dict[str, Any], title: str, width: int = 1200, row: int = 16) -> str:
    total = max(root["n"], 1)
    boxes, depth_max = [], 0

    def walk(node, name, x, depth):
        nonlocal depth_max
        w = node["n"] / total * width
        if w < 0.3:
            return
        depth_max = max(depth_max, depth)
        boxes.append((x, depth, w, name, node["n"]))
        cx = x
        for kid, child in sorted(node["kids"].items()):
            walk(child, kid, cx, depth + 1)
            cx += child["n"] / total * width

    walk(root, "all", 0, 0)
    height = (depth_max + 1) * row + 40
    body = [draw.text(width / 2, 18, f"{title} ({total} samples)", text_anchor="middle",
                      font_size=14, font_family="sans-serif")]
    for x, depth, w, name, n in boxes:
        y = height - (depth + 1) * row - 4
        box = [draw.tooltip(f"{name} ({n} samples, {n / total:.1%})"),
               draw.rect(x, y, w, row - 1, colour(name))]
        chars = int(w / 7)
        if chars >= 3:
            label = name if len(name) <= chars else name[:chars - 1] + "…"
            box.append(draw.text(x + 2, y + row - 4, label))
        body.append(draw.group(box))
    return draw.document(width, height, body, font="monospace", size=11)


def write(lines: Iterable[str], title: str, out: Path, folded: Path | None = None) -> None:
    """The flame graph of `perf script`'s `lines` in `out`, their folded stacks in `folded`."""
    stacks = fold(lines)
    if folded:
        folded.write_text("".join(f"{stack} {n}\n" for stack, n in sorted(stacks.items())))
    out.write_text(svg(tree(stacks), title))


if __name__ == "__main__":
    folded = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    write(sys.stdin, sys.argv[1], Path(sys.argv[2]), folded)
